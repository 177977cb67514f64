"""The controller's topic operations: CreateTopics (validation and replica assignment) and
DeleteTopics, by :class:`ControllerTopics`, a collaborator owned by
:class:`broker.controller.state.ControllerState`.

Replica assignment is Kafka's rack-unaware one: round-robin over the unfenced brokers
from a start index that rotates per created topic, the followers shifted once per full
round so replica pairs spread too.  Manual assignments must cover partitions ``0..n-1``
with distinct, registered replicas (at least one alive) of one length.  Names starting
with ``__cluster`` are reserved.  A created partition's ISR is its live replicas, its
leader the first of them, both epochs 0; the topic id is the topic record's offset.

Costs: create O(partitions x RF); delete O(topics) records (the image drops the
partitions).  Thread-safety: none; one owner (the controller's event loop), like the
state that owns it.  Same sans-IO contract as :mod:`broker.controller.state`: records go
to the owner's record sink, which applies them to the image at once (so a topic record
is visible to the partition records that follow it) and returns them with the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker.controller.config import ControllerConfig, validate_topic_configs
from broker.controller.results import Rejected, TopicResult, TopicSpec
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    METADATA_TOPIC,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.topics import topic_name_error


class ControllerTopics:
    """CreateTopics and DeleteTopics of the controller.

    Owns the rotating start index of replica assignment (initially the number of
    partitions in ``image``, so a restarted controller does not restart the rotation).
    Reads ``image`` (topics, registered and unfenced brokers) and ``config`` (defaults
    and limits), the objects its owner holds.  Writes only through ``emit``, the owner's
    record sink: it applies a record to the image at the next offset and queues it for
    the metadata log.  Called by :class:`~broker.controller.state.ControllerState`,
    which returns the results together with the records emitted meanwhile.
    """

    def __init__(self, config: ControllerConfig, image: MetadataImage,
                 emit: Callable[[MetadataRecord], None]) -> None:
        self.config = config
        self.image = image
        self._emit = emit
        self._next_start = sum(t.num_partitions for t in image.topics.values())

    def create_topics(self, specs: Sequence[TopicSpec],
                      validate_only: bool = False) -> list[TopicResult]:
        names = [s.name for s in specs]
        results = []
        for spec in specs:
            try:
                if names.count(spec.name) > 1:
                    raise Rejected(ErrorCode.INVALID_REQUEST,
                                    f"topic {spec.name!r} appears more than once in the request")
                n, rf = self._create_topic(spec, validate_only)
                results.append(TopicResult(spec.name, ErrorCode.NONE, None, n, rf))
            except Rejected as e:
                results.append(TopicResult(spec.name, e.code, e.message))
        return results

    def _create_topic(self, spec: TopicSpec, validate_only: bool) -> tuple[int, int]:
        reason = topic_name_error(spec.name)
        if reason is None and spec.name.startswith("__cluster"):
            reason = f"topic name {spec.name!r} is reserved ({METADATA_TOPIC})"
        if reason is not None:
            raise Rejected(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        if spec.name in self.image.topics:
            raise Rejected(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {spec.name!r} already exists")
        try:
            configs = validate_topic_configs(spec.configs, self.config)
        except InvalidConfigError as e:
            raise Rejected(ErrorCode.INVALID_CONFIG, e.message) from None
        assignment = self._check_assignment(spec) if spec.assignments else self._assign(spec)
        if validate_only:
            return len(assignment), len(assignment[0])
        topic_id = self.image.last_applied_offset + 1
        self._emit(TopicRecord(spec.name, topic_id, len(assignment), len(assignment[0]), configs))
        for index, replicas in enumerate(assignment):
            isr = tuple(b for b in replicas if self.image.is_alive(b))
            self._emit(PartitionRecord(spec.name, index, replicas, isr[0], 0, isr, 0))
        return len(assignment), len(assignment[0])

    def _assign(self, spec: TopicSpec) -> list[tuple[int, ...]]:
        """Kafka's rack-unaware assignment: round-robin from a rotating start index, the
        followers shifted once per full round so replica pairs spread too."""
        n = self.config.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = (self.config.default_replication_factor if spec.replication_factor == -1
              else spec.replication_factor)
        if not 1 <= n <= self.config.max_partitions_per_topic:
            raise Rejected(ErrorCode.INVALID_PARTITIONS, f"num_partitions must be in 1.."
                            f"{self.config.max_partitions_per_topic}, got {n}")
        live = self.image.unfenced_brokers()
        if rf < 1:
            raise Rejected(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"replication factor must be >= 1, got {rf}")
        if rf > len(live):
            raise Rejected(ErrorCode.INVALID_REPLICATION_FACTOR,
                            f"replication factor {rf} is larger than the {len(live)} "
                            "available brokers")
        count = len(live)
        start = self._next_start % count
        self._next_start += 1
        shift = start
        out = []
        for p in range(n):
            if p > 0 and p % count == 0:
                shift += 1
            first = (start + p) % count
            replicas = [live[first]]
            for j in range(rf - 1):
                replicas.append(live[(first + 1 + (shift + j) % (count - 1)) % count])
            out.append(tuple(replicas))
        return out

    def _check_assignment(self, spec: TopicSpec) -> list[tuple[int, ...]]:
        bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if spec.num_partitions != -1 or spec.replication_factor != -1:
            raise Rejected(ErrorCode.INVALID_REQUEST, "with assignments, num_partitions and "
                            "replication_factor must be -1")
        n = len(spec.assignments)
        if sorted(spec.assignments) != list(range(n)):
            raise Rejected(bad, f"assignments must cover partitions 0..{n - 1} exactly")
        if n > self.config.max_partitions_per_topic:
            raise Rejected(ErrorCode.INVALID_PARTITIONS, f"{n} partitions is more than "
                            f"{self.config.max_partitions_per_topic}")
        out = [tuple(spec.assignments[p]) for p in range(n)]
        rf = len(out[0])
        for p, replicas in enumerate(out):
            if not replicas or len(set(replicas)) != len(replicas) or len(replicas) != rf:
                raise Rejected(bad, f"partition {p}: replicas {list(replicas)} must be distinct "
                                f"and {rf} long like partition 0's")
            unknown = [b for b in replicas if b not in self.image.brokers]
            if unknown:
                raise Rejected(bad, f"partition {p}: brokers {unknown} are not registered")
            if not any(self.image.is_alive(b) for b in replicas):
                raise Rejected(bad, f"partition {p}: no replica of {list(replicas)} is alive")
        return out

    def delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        results = []
        for name in names:
            if name not in self.image.topics:
                results.append(TopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"topic {name!r} does not exist"))
                continue
            self._emit(RemoveTopicRecord(name))
            results.append(TopicResult(name, ErrorCode.NONE))
        return results
