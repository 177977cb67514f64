"""ElectLeaders' decisions: what an operator's election request does to each partition
(:func:`elect_leaders`, given the controller state's image and election paths by
:meth:`broker.controller.state.ControllerState.elect_leaders`).

Rules (see :mod:`broker.controller.state` for the safe election they defer to):

- *preferred*: a partition led by ``replicas[0]`` needs nothing (ELECTION_NOT_NEEDED); a
  led partition moves to ``replicas[0]`` (:data:`MOVE_TO_PREFERRED`) only when it is live,
  in the ISR and not marked cut by log recovery, the periodic preferred election's
  conditions (else PREFERRED_LEADER_NOT_AVAILABLE with the reason); an offline partition
  gets the safe election (:data:`SAFE_ELECTION`) and the request succeeded only if
  ``replicas[0]`` leads after it (:func:`check_elected`).
- *unclean*: a partition with a leader needs nothing; an offline one gets the safe
  election, which elects outside the ISR only where the topic sets
  ``unclean.leader.election.enable`` (Kafka's admin unclean election overrides that
  config; ours does not); no leader after it: ELIGIBLE_LEADERS_NOT_AVAILABLE.
- An unknown partition: UNKNOWN_TOPIC_OR_PARTITION.

Refusals are raised as :class:`~broker.controller.results.Rejected` and become the
partition's result.  Costs: O(partitions x replicas) plus the elections.
Thread-safety: none; called on the controller's event loop with its state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from broker.controller.results import ElectionType, PartitionResult, Rejected
from broker.metadata.image import MetadataImage, PartitionRegistration
from broker.metadata.records import NO_LEADER
from clients.protocol.errors import ErrorCode

__all__ = ["MOVE_TO_PREFERRED", "SAFE_ELECTION", "check_elected", "decide", "elect_leaders"]

# (topic, index, state) -> None: an election path of the controller state
ElectionPath = Callable[[str, int, PartitionRegistration], None]

MOVE_TO_PREFERRED = "move to the preferred replica"
SAFE_ELECTION = "the safe election of an offline partition"


def decide(kind: ElectionType, where: str, s: PartitionRegistration | None,
           alive: Callable[[int], bool], cut: Collection[int]) -> str:
    """What to do with partition ``where`` (state ``s``; ``cut``: its replicas marked cut
    by log recovery): :data:`MOVE_TO_PREFERRED` or :data:`SAFE_ELECTION`; or Rejected."""
    if s is None:
        raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
    preferred = s.replicas[0]
    if kind == ElectionType.UNCLEAN and s.leader != NO_LEADER:
        raise Rejected(ErrorCode.ELECTION_NOT_NEEDED, f"{where} has leader {s.leader}")
    if kind == ElectionType.PREFERRED and s.leader == preferred:
        raise Rejected(ErrorCode.ELECTION_NOT_NEEDED,
                       f"{where}: the preferred replica {preferred} leads")
    if s.leader == NO_LEADER:
        return SAFE_ELECTION  # only the safe election may choose for an offline partition
    why = ("is fenced" if not alive(preferred) else "is not in the ISR"
           if preferred not in s.isr else "lost records in log recovery"
           if preferred in cut else None)
    if why is not None:
        raise Rejected(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                       f"{where}: the preferred replica {preferred} {why}")
    return MOVE_TO_PREFERRED


def check_elected(kind: ElectionType, where: str, after: PartitionRegistration | None,
                  offline_reason: str | None) -> None:
    """Rejected unless the election left ``where`` with the leader the request wanted."""
    if after is None:
        raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{where} does not exist")
    reason = offline_reason or "no live in-sync replica"
    if kind == ElectionType.UNCLEAN and after.leader == NO_LEADER:
        raise Rejected(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, f"{where}: {reason}; "
                       "unclean.leader.election.enable is not set on the topic")
    if kind == ElectionType.PREFERRED and after.leader != after.replicas[0]:
        chosen = f"chose {after.leader}" if after.leader != NO_LEADER else f"waits: {reason}"
        raise Rejected(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                       f"{where} was offline; the safe election {chosen}")


def elect_leaders(kind: ElectionType, wanted: Sequence[tuple[str, int]] | None,
                  image: MetadataImage, alive: Callable[[int], bool],
                  cut_of: Callable[[tuple[str, int]], Collection[int]],
                  move_to_preferred: ElectionPath, safe_election: ElectionPath,
                  offline_reason: Callable[[tuple[str, int]], str | None]
                  ) -> list[PartitionResult]:
    """Each partition's result (``wanted`` None: every partition, leaving out those
    that need nothing, as Kafka's answer); the paths change ``image``."""
    results = []
    for topic, index in wanted if wanted is not None else [
            (t, i) for t, i, _ in image.partitions()]:
        key, where, s = (topic, index), f"{topic}-{index}", image.partition(topic, index)
        try:
            action = decide(kind, where, s, alive, cut_of(key))
            assert s is not None  # decide refused an unknown partition
            (move_to_preferred if action == MOVE_TO_PREFERRED else safe_election)(
                topic, index, s)
            check_elected(kind, where, image.partition(topic, index), offline_reason(key))
            results.append(PartitionResult(topic, index, ErrorCode.NONE))
        except Rejected as e:
            if wanted is not None or e.code != ErrorCode.ELECTION_NOT_NEEDED:
                results.append(PartitionResult(topic, index, e.code, e.message))
    return results
