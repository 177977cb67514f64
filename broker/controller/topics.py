"""The controller's topic operations: CreateTopics (validation and replica assignment),
DeleteTopics, CreatePartitions and the topic side of AlterConfigs /
IncrementalAlterConfigs, by :class:`ControllerTopics`, a collaborator owned by
:class:`broker.controller.state.ControllerState`.

Replica assignment is Kafka's rack-unaware one: round-robin over the unfenced brokers
from a start index that rotates per created topic (and per CreatePartitions entry), the
followers shifted once per full round so replica pairs spread too.  Manual assignments
must cover partitions ``0..n-1`` with distinct, registered replicas (at least one alive)
of one length.  Names starting with ``__cluster`` are reserved.  A created partition's
ISR is its live replicas, its leader the first of them, both epochs 0 (Kafka's: a
re-created topic starts at leader epoch 0 again and is told from the deleted one by its
topic id, a random UUID; the topic record still carries its own metadata offset in its
int ``topic_id`` field, :attr:`~broker.metadata.image.TopicInfo.created_offset`, only
for ``partition.metadata`` files written before topic ids were UUIDs).

CreatePartitions (Kafka's rules): the topic must exist (UNKNOWN_TOPIC_OR_PARTITION), the
new total must grow (INVALID_PARTITIONS, also above ``max_partitions_per_topic``; Kafka's
messages, :mod:`broker.metadata.topic_shape_checks`); the new
partitions get the topic's replication factor, placed like CreateTopics' or as given
(one replica list per new partition, each checked like a manual CreateTopics
assignment, else INVALID_REPLICA_ASSIGNMENT); they are partition records for the next
indexes, which the image reads as growth.

Configs: a topic's configs in the image are its complete overrides, normalized by
:func:`~broker.controller.config.validate_topic_configs` (which fills
``min_insync_replicas`` / ``unclean_leader_election`` from the controller's defaults).
IncrementalAlterConfigs applies SET / DELETE (back to the default) / APPEND / SUBTRACT
(list configs only: ``cleanup.policy``, from the built-in default when unset; else
INVALID_CONFIG) to them; AlterConfigs (Kafka's legacy semantics) replaces them, so
configs it does not name return to their defaults.  Either way the result is validated
as a whole (INVALID_CONFIG, naming the key) and, if it differs, written as one
``topic_configs`` record.  Per resource: unknown operation, null value (SET / APPEND /
legacy), a config named twice, a resource named twice -> INVALID_REQUEST; unknown config
name -> INVALID_CONFIG; invalid topic name -> INVALID_TOPIC_EXCEPTION; unknown topic ->
UNKNOWN_TOPIC_OR_PARTITION; any resource type but topic (2), brokers (4) included ->
INVALID_REQUEST (broker configs are static).  ``validate_only`` checks everything and
writes nothing.

Costs: create O(partitions x RF); delete O(topics) records (the image drops the
partitions); create partitions O(new partitions x RF); alter configs O(configs) per
resource.  Thread-safety: none; one owner (the controller's event loop), like the
state that owns it.  Same sans-IO contract as :mod:`broker.controller.state`: records go
to the owner's record sink, which applies them to the image at once (so a topic record
is visible to the partition records that follow it) and returns them with the result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from broker.controller.config import ControllerConfig, validate_topic_configs
from broker.controller.results import (
    ConfigOp,
    ConfigOperation,
    ConfigResult,
    PartitionsSpec,
    Rejected,
    ResourceChange,
    ResourceType,
    TopicResult,
    TopicSpec,
)
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    METADATA_TOPIC,
    AssignTopicIdRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
)
from broker.metadata.topic_config_checks import (
    LIST_CONFIGS,
    is_topic_config,
    kafka_config_name,
    list_items,
    topic_config_key,
    unknown_config,
)
from broker.metadata.topic_shape_checks import (
    partition_count_error,
    partition_increase_error,
    replication_factor_error,
)
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import ZERO_UUID, new_topic_id, topic_id_str, topic_name_error

log = logging.getLogger(__name__)


class ControllerTopics:
    """CreateTopics, DeleteTopics, CreatePartitions and topic config changes of the
    controller.

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
                n, rf, topic_uuid = self._create_topic(spec, validate_only)
                results.append(TopicResult(spec.name, ErrorCode.NONE, None, n, rf, topic_uuid))
            except Rejected as e:
                results.append(TopicResult(spec.name, e.code, e.message))
        return results

    def _create_topic(self, spec: TopicSpec, validate_only: bool) -> tuple[int, int, bytes]:
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
            return len(assignment), len(assignment[0]), ZERO_UUID
        created_offset = self.image.last_applied_offset + 1  # the record's own offset
        topic_uuid = self._new_topic_uuid()
        self._emit(TopicRecord(spec.name, created_offset, len(assignment), len(assignment[0]),
                               configs, topic_uuid))
        self._emit_new_partitions(spec.name, 0, assignment)
        return len(assignment), len(assignment[0]), topic_uuid

    def _new_topic_uuid(self) -> bytes:
        """A random topic id no topic of the image has."""
        while True:
            topic_uuid = new_topic_id()
            if self.image.topic_by_id(topic_uuid) is None:
                return topic_uuid

    def assign_missing_topic_ids(self) -> None:
        """Upgrade a log written before topic ids: one ``assign_topic_id`` record per
        topic without an id (see the module docstring)."""
        for name in sorted(self.image.topics):
            if self.image.topics[name].topic_uuid == ZERO_UUID:
                topic_uuid = self._new_topic_uuid()
                self._emit(AssignTopicIdRecord(name, topic_uuid))
                log.info("topic %r created before topic ids: its id is %s", name,
                         topic_id_str(topic_uuid))

    def _assign(self, spec: TopicSpec) -> list[tuple[int, ...]]:
        n = self.config.num_partitions if spec.num_partitions == -1 else spec.num_partitions
        rf = (self.config.default_replication_factor if spec.replication_factor == -1
              else spec.replication_factor)
        _reject(partition_count_error(n, self.config.max_partitions_per_topic))
        return self._place(n, rf)

    def _place(self, n: int, rf: int) -> list[tuple[int, ...]]:
        """Kafka's rack-unaware assignment of ``n`` partitions: round-robin from a rotating
        start index, the followers shifted once per full round so replica pairs spread too."""
        live = self.image.unfenced_brokers()
        _reject(replication_factor_error(rf, len(live)))
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
        if spec.num_partitions != -1 or spec.replication_factor != -1:
            raise Rejected(ErrorCode.INVALID_REQUEST, "with assignments, num_partitions and "
                            "replication_factor must be -1")
        n = len(spec.assignments)
        if sorted(spec.assignments) != list(range(n)):
            raise Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"assignments must cover partitions 0..{n - 1} exactly")
        if n > self.config.max_partitions_per_topic:
            raise Rejected(ErrorCode.INVALID_PARTITIONS, f"{n} partitions is more than "
                            f"{self.config.max_partitions_per_topic}")
        out = [tuple(spec.assignments[p]) for p in range(n)]
        rf = len(out[0])
        for p, replicas in enumerate(out):
            self._check_replicas(p, replicas, rf)
        return out

    def _check_replicas(self, p: int, replicas: tuple[int, ...], rf: int) -> None:
        """One manually assigned partition: ``rf`` distinct registered brokers, one alive."""
        bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if not replicas or len(set(replicas)) != len(replicas) or len(replicas) != rf:
            raise Rejected(bad, f"partition {p}: replicas {list(replicas)} must be {rf} "
                            "distinct brokers (the topic's replication factor)")
        unknown = [b for b in replicas if b not in self.image.brokers]
        if unknown:
            raise Rejected(bad, f"partition {p}: brokers {unknown} are not registered")
        if not any(self.image.is_alive(b) for b in replicas):
            raise Rejected(bad, f"partition {p}: no replica of {list(replicas)} is alive")

    def _emit_new_partitions(self, name: str, first: int,
                             assignment: Sequence[tuple[int, ...]]) -> None:
        """Partition records of new partitions ``first..``: ISR the live replicas, the
        first of them leads, leader and partition epoch 0 (Kafka's).  A broker that still
        hosts a deleted topic of the same name tells it from this one by topic id
        (:mod:`broker.metadata.replica_plan`), not by epoch."""
        for index, replicas in enumerate(assignment, first):
            isr = tuple(b for b in replicas if self.image.is_alive(b))
            self._emit(PartitionRecord(name, index, replicas, isr[0], 0, isr, 0))

    # -- CreatePartitions -------------------------------------------------------------

    def create_partitions(self, specs: Sequence[PartitionsSpec],
                          validate_only: bool = False) -> list[TopicResult]:
        names = [s.name for s in specs]
        results = []
        for spec in specs:
            try:
                if names.count(spec.name) > 1:
                    raise Rejected(ErrorCode.INVALID_REQUEST,
                                    f"topic {spec.name!r} appears more than once in the request")
                self._create_partitions(spec, validate_only)
                results.append(TopicResult(spec.name, ErrorCode.NONE))
            except Rejected as e:
                results.append(TopicResult(spec.name, e.code, e.message))
        return results

    def _create_partitions(self, spec: PartitionsSpec, validate_only: bool) -> None:
        info = self.image.topics.get(spec.name)
        if info is None:
            raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"topic {spec.name!r} does not exist")
        current = info.num_partitions
        _reject(partition_increase_error(current, spec.count,
                                         self.config.max_partitions_per_topic))
        new = spec.count - current
        rf = info.replication_factor
        if spec.assignments is None:
            assignment = self._place(new, rf)
        else:
            if len(spec.assignments) != new:
                raise Rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                f"{len(spec.assignments)} assignments for {new} new partitions")
            assignment = [tuple(a) for a in spec.assignments]
            for index, replicas in enumerate(assignment, current):
                self._check_replicas(index, replicas, rf)
        if not validate_only:
            self._emit_new_partitions(spec.name, current, assignment)

    # -- AlterConfigs / IncrementalAlterConfigs ---------------------------------------

    def alter_configs(self, resources: Sequence[ResourceChange], validate_only: bool = False,
                      incremental: bool = True) -> list[ConfigResult]:
        keys = [(r.resource_type, r.name) for r in resources]
        results = []
        for resource in resources:
            try:
                if keys.count((resource.resource_type, resource.name)) > 1:
                    raise Rejected(ErrorCode.INVALID_REQUEST,
                                    f"resource {resource.name!r} appears more than once")
                if resource.resource_type != ResourceType.TOPIC:
                    kind = ("broker" if resource.resource_type == ResourceType.BROKER
                            else f"type {resource.resource_type}")
                    raise Rejected(ErrorCode.INVALID_REQUEST, f"altering {kind} configs is "
                                    "not supported (topic configs only)")
                self._alter_topic_configs(resource, validate_only, incremental)
                results.append(ConfigResult(resource.resource_type, resource.name,
                                            ErrorCode.NONE))
            except Rejected as e:
                results.append(ConfigResult(resource.resource_type, resource.name, e.code,
                                            e.message))
        return results

    def _alter_topic_configs(self, resource: ResourceChange, validate_only: bool,
                             incremental: bool) -> None:
        name = resource.name
        reason = topic_name_error(name)
        if reason is not None:
            raise Rejected(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        info = self.image.topics.get(name)
        if info is None:
            raise Rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        seen: set[str] = set()
        for c in resource.configs:
            key = topic_config_key(c.name)
            if key in seen:
                raise Rejected(ErrorCode.INVALID_REQUEST,
                               f"config {kafka_config_name(key)} is named twice")
            seen.add(key)
            if not is_topic_config(key):
                raise Rejected(ErrorCode.INVALID_CONFIG, unknown_config(c.name).message)
        if incremental:
            wanted = _apply_operations(info.configs, resource.configs)
        else:
            nulls = [c.name for c in resource.configs if c.value is None]
            if nulls:
                raise Rejected(ErrorCode.INVALID_REQUEST,
                                f"null values are not supported: {nulls}")
            wanted = {topic_config_key(c.name): c.value or "" for c in resource.configs}
        try:
            configs = validate_topic_configs(wanted, self.config)
        except InvalidConfigError as e:
            raise Rejected(ErrorCode.INVALID_CONFIG, e.message) from None
        if not validate_only and configs != info.configs:
            self._emit(TopicConfigsRecord(name, configs))

    def delete_topics(self, topics: Sequence[str | bytes]) -> list[TopicResult]:
        """Delete each topic named (a str) or given by its id (16 bytes)."""
        results = []
        for topic in topics:
            if isinstance(topic, bytes):
                info = self.image.topic_by_id(topic)
                if info is None:
                    results.append(TopicResult("", ErrorCode.UNKNOWN_TOPIC_ID,
                                               f"no topic has id {topic_id_str(topic)}",
                                               topic_uuid=topic))
                    continue
            else:
                info = self.image.topics.get(topic)
                if info is None:
                    results.append(TopicResult(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                               f"topic {topic!r} does not exist"))
                    continue
            self._emit(RemoveTopicRecord(info.name))
            results.append(TopicResult(info.name, ErrorCode.NONE, topic_uuid=info.topic_uuid))
        return results


def _reject(error: MiniKafkaError | None) -> None:
    """Raise a shape check's error (:mod:`broker.metadata.topic_shape_checks`) as Rejected."""
    if error is not None:
        raise Rejected(error.code, error.message)


def _apply_operations(current: Mapping[str, str], ops: Sequence[ConfigOp]) -> dict[str, str]:
    """A topic's overrides after IncrementalAlterConfigs' operations (keys already checked
    known and distinct).  APPEND/SUBTRACT work on list configs only, starting from the
    built-in default when the topic has no override."""
    from storage.config import LogConfig  # storage is below broker: allowed import

    out = dict(current)
    for c in ops:
        key, op = topic_config_key(c.name), c.operation
        if op == ConfigOperation.DELETE:
            out.pop(key, None)
            continue
        if op not in (ConfigOperation.SET, ConfigOperation.APPEND, ConfigOperation.SUBTRACT):
            raise Rejected(ErrorCode.INVALID_REQUEST,
                            f"config {kafka_config_name(key)}: unknown operation {op}")
        if c.value is None and op != ConfigOperation.SUBTRACT:
            raise Rejected(ErrorCode.INVALID_REQUEST,
                            f"config {kafka_config_name(key)}: a null value is not "
                            "supported")
        if op == ConfigOperation.SET:
            out[key] = c.value or ""
            continue
        if key not in LIST_CONFIGS:
            verb = "append" if op == ConfigOperation.APPEND else "subtract"
            raise Rejected(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed "
                           f"for config key: {kafka_config_name(key)}")
        base = out[key] if key in out else str(getattr(LogConfig(), key))
        items = list_items(base)
        given = list_items(c.value or "")
        if op == ConfigOperation.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[key] = ",".join(items)
    return out
