"""Committed offsets of the group coordinator: OffsetCommit, TxnOffsetCommit and
OffsetFetch (Kafka's offset path of GroupCoordinator and GroupMetadataManager).

:class:`GroupOffsets` is the coordinator's offsets room:

- uses the group cache (:class:`~broker.group.metadata_manager.GroupMetadataManager`:
  the coordinator and member checks, new groups, :meth:`store_offsets` which writes the
  offsets and then caches them) and the member sessions (a member's commit is its
  heartbeat), both given at construction with the config, the clock and
  ``partition_exists(topic, index)`` (what a commit's partitions are checked against);
- is called by the coordinator: :meth:`commit_offsets`, :meth:`commit_txn_offsets`,
  :meth:`fetch_offsets`.

OffsetCommit checks, in Kafka's order:
- the coordinator owns the group (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS);
- generation -1 with an empty member id (a standalone consumer's simple commit) is
  allowed only when the group does not exist (it is created, Empty) or is Empty;
  for a group with members it is UNKNOWN_MEMBER_ID;
- otherwise the member must exist (UNKNOWN_MEMBER_ID; FENCED_INSTANCE_ID for a replaced
  static instance), the generation must be the group's (ILLEGAL_GENERATION; a group
  that does not exist gives ILLEGAL_GENERATION too), and the group must not be
  CompletingRebalance (REBALANCE_IN_PROGRESS).  Commits during PreparingRebalance with
  the current generation are allowed (so members can commit while revoking).
- per partition: metadata longer than ``offset_metadata_max_bytes`` ->
  OFFSET_METADATA_TOO_LARGE; a negative offset -> INVALID_COMMIT_OFFSET_SIZE*; a topic
  or partition the cluster does not know -> UNKNOWN_TOPIC_OR_PARTITION.
The accepted offsets are appended as one batch to the group's offsets partition and
answered once the ISR has them (acks=all); a failed write maps to NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE (see :func:`store_error`).  Only then is the in-memory cache
updated (and only by a commit written later in the log than the cached one).  A commit
by a member also counts as its heartbeat.

TxnOffsetCommit (a transactional producer's ``send_offsets_to_transaction``), Kafka's
``validateOffsetCommit`` with ``isTransactional``: the coordinator checks as above; a
group that does not exist is created (Empty); v3+ carry the consumer's generation,
member id and instance id: with a generation >= 0 or a member id, the member must exist
(FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID) and a generation >= 0 must be the group's
(ILLEGAL_GENERATION); without them (v0-2, or a standalone consumer) any group state is
accepted, since older versions carry no member; a negative producer id or epoch is
INVALID_REQUEST.  The per-partition checks are OffsetCommit's.  The accepted offsets
are written as one *transactional* batch of the request's producer id and epoch
(acks=all, answered once replicated; the producer state's errors pass on:
INVALID_PRODUCER_EPOCH for a fenced epoch...) and are *pending*
(:mod:`broker.group.txn_offsets`) from before the write: invisible to OffsetFetch until
the producer's COMMIT marker on the partition (:meth:`~broker.group.metadata_manager.
GroupMetadataManager.complete_txn`), dropped at its ABORT (a failed write takes them
back).  It is not a heartbeat.  KIP-890's verification of the offsets partition happens
before, in :meth:`broker.group.offsets_topic.OffsetsTopic.commit_txn_offsets`, which
hands the producer's guard on.

OffsetFetch answers from the cache, one group at a time: offset -1, metadata "" (and no
error) for a partition without a committed offset; ``topics`` null means every partition
the group committed.  With ``require_stable`` (v7+, KIP-447; read_committed consumers
send it) a partition with a commit being written or a transactional offset pending
answers UNSTABLE_OFFSET_COMMIT (offset -1; the client retries).

(* Kafka accepts any offset; a negative one is always a client bug here.)

Costs: commit O(partitions) plus one append; fetch O(partitions asked or committed;
times the group's pending producers with ``require_stable``).
Not thread-safe: the broker's event loop (or a test's thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.group.members import Group
from broker.group.metadata import OffsetCommitValue
from broker.group.metadata_manager import GroupMetadataManager
from broker.group.protocol import (
    Error,
    GroupCoordinatorConfig,
    TxnProducer,
    member_error,
    store_error,
    txn_store_error,
)
from broker.group.sessions import MemberSessions
from broker.group.state import GroupState
from broker.requests.respond import Respond
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetFetchRequestTopic,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopicPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
)
from clients.protocol.topics import TopicPartition, topic_name_error
from replication.producer_state import VerificationGuard
from timer.clock import Clock

_S = GroupState


class GroupOffsets:
    """OffsetCommit and OffsetFetch over the group cache; see the module docstring."""

    def __init__(self, config: GroupCoordinatorConfig, clock: Clock,
                 manager: GroupMetadataManager, sessions: MemberSessions,
                 partition_exists: Callable[[str, int], bool]) -> None:
        self.config = config
        self.clock = clock
        self.manager = manager
        self.sessions = sessions
        self.partition_exists = partition_exists

    def _commit_group_error(self, body: OffsetCommitRequest) -> tuple[Group | None, Error | None]:
        group_id, generation = body["group_id"], body["generation_id"]
        simple = (generation < 0 and not body["member_id"]
                  and body.get("group_instance_id") is None)
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            return None, error
        group = self.manager.groups.get(group_id)
        if group is None:
            if not simple:
                return None, (ErrorCode.ILLEGAL_GENERATION, f"group {group_id!r} has no "
                              f"generation {generation}")
            return self.manager.add_group(group_id), None
        if simple:
            if group.is_(_S.EMPTY):
                return group, None
            return group, (ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has members: "
                           "commits need a member id and generation")
        group, error = self.manager.member_request(body)
        if error is None and group is not None and group.is_(_S.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS, "the group is completing a rebalance"
        if error is None and group is not None:
            self.sessions.keep_alive(group, group.members[body["member_id"]])
        return group, error

    def _partition_error(self, topic: str, p: OffsetCommitRequestPartition
                         | TxnOffsetCommitRequestPartition) -> Error | None:
        """Why one partition's commit is refused (None: accepted)."""
        max_metadata = self.config.offset_metadata_max_bytes
        metadata = p.get("committed_metadata")
        if metadata is not None and len(metadata.encode()) > max_metadata:
            return (ErrorCode.OFFSET_METADATA_TOO_LARGE,
                    f"metadata is longer than {max_metadata} bytes")
        if p["committed_offset"] < 0:
            return (ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
                    f"offset {p['committed_offset']} is negative")
        if topic_name_error(topic) is not None or not \
                self.partition_exists(topic, p["partition_index"]):
            return (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown partition {topic}-{p['partition_index']}")
        return None

    def commit_offsets(self, body: OffsetCommitRequest,
                       respond: Respond[OffsetCommitResponse]) -> None:
        """OffsetCommit: ``respond`` gets the answer once the accepted offsets are
        written (at once when none is)."""
        group, error = self._commit_group_error(body)
        now = self.clock.now_ms()
        results: list[tuple[str, OffsetCommitResponsePartition]] = []
        accepted: list[tuple[TopicPartition, OffsetCommitValue,
                             OffsetCommitResponsePartition]] = []
        for topic in body["topics"]:
            for p in topic["partitions"]:
                result: OffsetCommitResponsePartition = {
                    "partition_index": p["partition_index"], "error_code": 0,
                    "error_message": None}
                results.append((topic["name"], result))
                refused = error or self._partition_error(topic["name"], p)
                if refused is not None:
                    result.update({"error_code": int(refused[0]), "error_message": refused[1]})
                    continue
                value = OffsetCommitValue(p["committed_offset"], p["committed_leader_epoch"],
                                          p.get("committed_metadata"), now)
                accepted.append((TopicPartition(topic["name"], p["partition_index"]), value,
                                 result))

        def answer() -> None:
            by_topic: dict[str, list[OffsetCommitResponsePartition]] = {}
            for name, result in results:
                by_topic.setdefault(name, []).append(result)
            respond({"topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

        if group is None or not accepted:
            answer()
            return

        def stored(code: ErrorCode) -> None:
            mapped = store_error(code)
            if mapped != ErrorCode.NONE:
                for _tp, _value, result in accepted:
                    result.update({"error_code": int(mapped), "error_message":
                                   f"write failed: {ErrorCode(code).name}"})
            answer()

        self.manager.store_offsets(group, [(tp, value) for tp, value, _ in accepted], stored)

    def _txn_group_error(self, body: TxnOffsetCommitRequest
                         ) -> tuple[Group | None, Error | None]:
        """Kafka's ``validateOffsetCommit`` for a transactional commit (see the module
        docstring)."""
        group_id = body["group_id"]
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            return None, error
        if body["producer_id"] < 0 or body["producer_epoch"] < 0:
            return None, (ErrorCode.INVALID_REQUEST, "a transactional offset commit needs a "
                          "producer id and epoch")
        group = self.manager.groups.get(group_id) or self.manager.add_group(group_id)
        generation, member_id = body.get("generation_id", -1), body.get("member_id", "")
        instance = body.get("group_instance_id")
        if generation < 0 and not member_id and instance is None:
            return group, None
        error = member_error(group, member_id, instance)
        if error is not None and error[0] == ErrorCode.UNKNOWN_MEMBER_ID \
                and generation < 0 and not member_id:
            error = None  # an instance id alone names no member to check
        if error is None and generation >= 0 and generation != group.generation_id:
            error = (ErrorCode.ILLEGAL_GENERATION, f"generation {generation} is not the "
                     f"group's {group.generation_id}")
        return group, error

    def commit_txn_offsets(self, body: TxnOffsetCommitRequest,
                           respond: Respond[TxnOffsetCommitResponse],
                           guard: VerificationGuard | None = None,
                           verification_required: bool = False) -> None:
        """TxnOffsetCommit: ``respond`` gets the answer once the accepted offsets are
        written as the producer's transactional batch (pending until its marker).
        ``guard`` / ``verification_required``: KIP-890, see
        :class:`~broker.group.protocol.TxnProducer`."""
        group, error = self._txn_group_error(body)
        now = self.clock.now_ms()
        results: list[tuple[str, TxnOffsetCommitResponsePartition]] = []
        accepted: list[tuple[TopicPartition, OffsetCommitValue,
                             TxnOffsetCommitResponsePartition]] = []
        for topic in body["topics"]:
            for p in topic["partitions"]:
                result: TxnOffsetCommitResponsePartition = {
                    "partition_index": p["partition_index"], "error_code": 0}
                results.append((topic["name"], result))
                refused = error or self._partition_error(topic["name"], p)
                if refused is not None:
                    result["error_code"] = int(refused[0])
                    continue
                value = OffsetCommitValue(p["committed_offset"],
                                          p.get("committed_leader_epoch", -1),
                                          p.get("committed_metadata"), now)
                accepted.append((TopicPartition(topic["name"], p["partition_index"]), value,
                                 result))

        def answer() -> None:
            by_topic: dict[str, list[TxnOffsetCommitResponsePartition]] = {}
            for name, result in results:
                by_topic.setdefault(name, []).append(result)
            respond({"throttle_time_ms": 0,
                     "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

        if group is None or not accepted:
            if group is not None:
                self.manager.maybe_drop(group)
            answer()
            return

        def stored(code: ErrorCode) -> None:
            mapped = txn_store_error(code)
            if mapped != ErrorCode.NONE:
                for _tp, _value, result in accepted:
                    result["error_code"] = int(mapped)
                self.manager.maybe_drop(group)
            answer()

        self.manager.store_txn_offsets(
            group, TxnProducer(body["producer_id"], body["producer_epoch"], guard,
                               verification_required),
            [(tp, value) for tp, value, _ in accepted], stored)

    def fetch_offsets(self, group_id: str,
                      wanted: Sequence[OffsetFetchRequestTopic] | None,
                      require_stable: bool = False
                      ) -> tuple[ErrorCode, list[OffsetFetchResponseTopic]]:
        """One group's committed offsets: ``(group error, topics)``.  ``wanted`` is
        OffsetFetch's topic list (``name``, ``partition_indexes``), None for every
        partition the group has offsets for.  A partition without an offset: -1 and
        metadata "".  ``require_stable``: a partition with a commit pending answers
        UNSTABLE_OFFSET_COMMIT."""
        error = self.manager.coordinator_error(group_id)
        if error is not None:
            return error[0], []
        group = self.manager.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        pairs = (sorted(offsets) if wanted is None else
                 [(t["name"], i) for t in wanted for i in t["partition_indexes"]])
        by_topic: dict[str, list[OffsetFetchResponseTopicPartition]] = {}
        for topic, index in pairs:
            tp = TopicPartition(topic, index)
            if require_stable and group is not None and group.has_pending_commit(tp):
                by_topic.setdefault(topic, []).append({
                    "partition_index": index, "committed_offset": -1,
                    "committed_leader_epoch": -1, "metadata": "",
                    "error_code": int(ErrorCode.UNSTABLE_OFFSET_COMMIT),
                    "error_message": "a commit of this partition is pending (being "
                    "written, or in an open transaction)"})
                continue
            found = offsets.get(tp)
            by_topic.setdefault(topic, []).append({
                "partition_index": index, "error_code": 0, "error_message": None,
                "committed_offset": found.offset if found else -1,
                "committed_leader_epoch": found.leader_epoch if found else -1,
                "metadata": (found.metadata or "") if found else ""})
        return ErrorCode.NONE, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


def txn_commit_error(body: TxnOffsetCommitRequest, code: ErrorCode) -> TxnOffsetCommitResponse:
    """A TxnOffsetCommit answer with ``code`` for every partition of the request."""
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": int(code)}
            for p in t["partitions"]]} for t in body["topics"]]}
