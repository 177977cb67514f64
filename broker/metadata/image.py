"""The metadata image: brokers, topics and partitions as of one metadata offset.

Built by applying :mod:`broker.metadata.records` records in log order (controller and
brokers alike), or by decoding a snapshot.

Snapshot file (``MetadataImage.encode_snapshot``; integers big-endian):

| offset | size | field                | meaning                                           |
|--------|------|----------------------|---------------------------------------------------|
| 0      | 4    | magic                | ``b"MKMS"``                                       |
| 4      | 2    | version              | int16, 1                                          |
| 6      | 8    | last_applied_offset  | int64, the last log offset the image includes     |
| 14     | 4    | payload_length       | uint32                                            |
| 18     | 4    | crc                  | uint32 CRC-32C of the payload                     |
| 22     | n    | payload              | msgpack array of records (maps as above) that     |
|        |      |                      | rebuild the image when applied in order           |

Rules enforced by :meth:`MetadataImage.apply` (a record that breaks one raises
:class:`MetadataRecordError` and leaves the image unchanged): offsets strictly
increase; broker epochs of one broker increase; fence/unfence name the current epoch
and change the state; a partition's ``partition_epoch`` increases with every record,
its ``leader_epoch`` never decreases and increases whenever the leader changes; the ISR
is a non-empty subset of the replicas and holds the leader (unless there is none); a
partition record for a partition the topic does not have yet is accepted only while the
topic is being created (below its ``num_partitions``) or, once all exist, for the next
index (CreatePartitions: ``num_partitions`` grows by one); ``topic_configs`` names an
existing topic and replaces its configs.  A partition record's ``adding_replicas`` /
``removing_replicas`` (a reassignment in flight, :mod:`broker.controller.reassignments`)
are kept in its :class:`PartitionRegistration`, and the image keeps the set of
partitions that have one (:meth:`MetadataImage.reassigning`).  A topic's id
(``topic_uuid``, Kafka's format) is unique among the topics, given by its topic record
or, for a topic created before topic ids, once by an ``assign_topic_id`` record (a topic
without one has the zero UUID).


Costs: apply O(replicas) per record (a ``remove_topic`` also O(partitions being
reassigned)); snapshot encode/decode O(image).
Thread-safety: a MetadataImage belongs to one thread (the controller's or the broker's
event loop) and is mutated only by ``apply``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

import msgpack
from crc32c import crc32c

from broker.metadata.records import (
    NO_LEADER,
    AssignTopicIdRecord,
    FenceBrokerRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    record_from_map,
    record_to_map,
)
from clients.protocol.topics import ZERO_UUID

_SNAPSHOT_MAGIC = b"MKMS"
_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">4shqII")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker: its epoch (the offset of its registration record), the
    incarnation that registered, where it listens for clients (``host:port``) and for
    its followers (:attr:`replication_endpoint`), and whether it is fenced."""

    broker_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None
    fenced: bool
    internal_host: str | None = None
    internal_port: int | None = None

    @property
    def replication_endpoint(self) -> tuple[str, int]:
        """Where followers fetch from: the internal listener, else the client one."""
        if self.internal_host is not None and self.internal_port is not None:
            return self.internal_host, self.internal_port
        return self.host, self.port


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """The controller's record of one partition (Kafka's name): replicas in preference
    order, leader (``NO_LEADER``: offline), ISR, and both epochs, as of the last
    ``partition`` record.  Not a replica's own state (that lives in
    :mod:`replication.partition_state`)."""

    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    unclean_elected: bool = False
    # the reassignment in flight (Kafka's names; see broker.metadata.records)
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    def next_record(self, topic: str, index: int, leader: int, leader_epoch: int,
                    isr: tuple[int, ...], unclean_elected: bool) -> PartitionRecord:
        """This partition's next record with a new leader and ISR: the replicas and the
        reassignment in flight carried over, the partition epoch + 1."""
        return PartitionRecord(topic, index, self.replicas, leader, leader_epoch, isr,
                               self.partition_epoch + 1, unclean_elected,
                               self.adding_replicas, self.removing_replicas)

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where a reassignment takes the partition (its replicas when none is in flight)."""
        return tuple(b for b in self.replicas if b not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in flight (its replicas when none is)."""
        return tuple(b for b in self.replicas if b not in self.adding_replicas)


@dataclass(slots=True)
class TopicInfo:
    """A topic of the cluster: its id in Kafka's format (``topic_uuid``, what tells it
    from a deleted topic of the same name; the zero UUID until a log written before
    topic ids is upgraded), sizes, configs, the registration of each partition, and
    ``created_offset``, the metadata offset of its topic record (the record's
    ``topic_id`` field), used only to recognize ``partition.metadata`` files written
    before topic ids were UUIDs (:mod:`broker.metadata.replica_plan`)."""

    name: str
    created_offset: int
    num_partitions: int
    replication_factor: int
    configs: dict[str, str]
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)
    topic_uuid: bytes = ZERO_UUID


class MetadataImage:
    """Brokers and topics as of ``last_applied_offset`` (-1: nothing applied yet)."""

    __slots__ = ("_reassigning", "_topic_ids", "brokers", "last_applied_offset",
                 "producer_ids", "topic_names_by_id", "topics")

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        # (topic, index) of every partition with a reassignment in flight
        self._reassigning: set[tuple[str, int]] = set()
        self.topic_names_by_id: dict[bytes, str] = {}  # topic_uuid -> name (ids assigned)
        self.last_applied_offset = -1
        self.producer_ids: ProducerIdsRecord | None = None  # the last block handed out
        # topic_ids()'s answer and the last_applied_offset it was built at
        self._topic_ids: tuple[int, dict[str, tuple[bytes, int]]] | None = None

    @property
    def next_producer_id(self) -> int:
        """The first producer id never handed out."""
        return 0 if self.producer_ids is None else self.producer_ids.next_producer_id

    # -- applying ---------------------------------------------------------------------

    def apply(self, record: MetadataRecord, offset: int) -> None:
        """Apply the record stored at ``offset`` (> ``last_applied_offset``)."""
        if type(offset) is not int or offset <= self.last_applied_offset:
            raise MetadataRecordError(
                f"record offset {offset!r} is not after the last applied offset "
                f"{self.last_applied_offset}"
            )
        self._apply(record)
        self.last_applied_offset = offset

    def advance_to(self, offset: int) -> None:
        """Count the log entry at ``offset`` (> ``last_applied_offset``) as applied: a
        quorum control record (LeaderChange) takes an offset and holds no metadata."""
        if type(offset) is not int or offset <= self.last_applied_offset:
            raise MetadataRecordError(
                f"entry offset {offset!r} is not after the last applied offset "
                f"{self.last_applied_offset}")
        self.last_applied_offset = offset

    def _apply(self, record: MetadataRecord) -> None:
        if isinstance(record, PartitionRecord):
            self._apply_partition(record)
        elif isinstance(record, RegisterBrokerRecord):
            old = self.brokers.get(record.broker_id)
            if old is not None and old.broker_epoch >= record.broker_epoch:
                raise MetadataRecordError(
                    f"broker {record.broker_id} registration epoch {record.broker_epoch} is not "
                    f"above the current {old.broker_epoch}"
                )
            self.brokers[record.broker_id] = BrokerInfo(
                record.broker_id, record.broker_epoch, record.incarnation_id, record.host,
                record.port, record.rack, fenced=True, internal_host=record.internal_host,
                internal_port=record.internal_port)
        elif isinstance(record, FenceBrokerRecord | UnfenceBrokerRecord):
            fence = isinstance(record, FenceBrokerRecord)
            info = self.brokers.get(record.broker_id)
            if info is None or info.broker_epoch != record.broker_epoch:
                raise MetadataRecordError(
                    f"{record.TYPE}: broker {record.broker_id} epoch {record.broker_epoch} is not "
                    "the current registration"
                )
            if info.fenced == fence:
                raise MetadataRecordError(
                    f"{record.TYPE}: broker {record.broker_id} is already "
                    f"{'fenced' if fence else 'unfenced'}"
                )
            self.brokers[record.broker_id] = replace(info, fenced=fence)
        elif isinstance(record, TopicRecord):
            if record.name in self.topics:
                raise MetadataRecordError(f"topic {record.name!r} already exists")
            self._check_new_uuid(record.topic_uuid)
            self.topics[record.name] = TopicInfo(record.name, record.topic_id,
                                                 record.num_partitions,
                                                 record.replication_factor, dict(record.configs),
                                                 topic_uuid=record.topic_uuid)
            if record.topic_uuid != ZERO_UUID:
                self.topic_names_by_id[record.topic_uuid] = record.name
        elif isinstance(record, AssignTopicIdRecord):
            topic = self.topics.get(record.name)
            if topic is None or topic.topic_uuid != ZERO_UUID:
                raise MetadataRecordError(f"assign_topic_id: no topic {record.name!r} without "
                                          "an id")
            self._check_new_uuid(record.topic_uuid)
            topic.topic_uuid = record.topic_uuid
            self.topic_names_by_id[record.topic_uuid] = record.name
        elif isinstance(record, TopicConfigsRecord):
            topic = self.topics.get(record.name)
            if topic is None:
                raise MetadataRecordError(f"topic_configs: no topic {record.name!r}")
            topic.configs = dict(record.configs)
        elif isinstance(record, RemoveTopicRecord):
            removed = self.topics.pop(record.name, None)
            if removed is None:
                raise MetadataRecordError(f"remove_topic: no topic {record.name!r}")
            self._reassigning = {k for k in self._reassigning if k[0] != record.name}
            self.topic_names_by_id.pop(removed.topic_uuid, None)
        elif isinstance(record, ProducerIdsRecord):
            if record.next_producer_id <= self.next_producer_id:
                raise MetadataRecordError(
                    f"producer_ids: next producer id {record.next_producer_id} is not above "
                    f"the current {self.next_producer_id}")
            self.producer_ids = record
        else:
            raise MetadataRecordError(f"not a metadata record: {record!r}")

    def _check_new_uuid(self, topic_uuid: bytes) -> None:
        if topic_uuid != ZERO_UUID and topic_uuid in self.topic_names_by_id:
            raise MetadataRecordError(f"topic id {topic_uuid.hex()} is topic "
                                      f"{self.topic_names_by_id[topic_uuid]!r}'s")

    def _apply_partition(self, r: PartitionRecord) -> None:
        topic = self.topics.get(r.topic)
        if topic is None:
            raise MetadataRecordError(f"partition record for unknown topic {r.topic!r}")
        # CreatePartitions: the next partition of a topic whose partitions all exist
        grows = (r.partition == topic.num_partitions
                 and len(topic.partitions) == topic.num_partitions)
        if r.partition >= topic.num_partitions and not grows:
            raise MetadataRecordError(
                f"partition {r.partition} outside topic {r.topic!r} of {topic.num_partitions}"
            )
        # more while a reassignment is in flight (broker.controller.reassignments: the
        # target replicas plus the leaving ones), never fewer
        if len(r.replicas) < topic.replication_factor:
            raise MetadataRecordError(
                f"{r.topic}-{r.partition}: {len(r.replicas)} replicas, the topic's replication "
                f"factor is {topic.replication_factor}"
            )
        old = topic.partitions.get(r.partition)
        if old is not None:
            where = f"{r.topic}-{r.partition}"
            # replicas change by reassignment only (broker.controller.reassignments)
            if r.partition_epoch <= old.partition_epoch:
                raise MetadataRecordError(
                    f"{where}: partition epoch {r.partition_epoch} is not above "
                    f"{old.partition_epoch}"
                )
            if r.leader_epoch < old.leader_epoch or (
                r.leader != old.leader and r.leader_epoch == old.leader_epoch
            ):
                raise MetadataRecordError(
                    f"{where}: leader {old.leader}->{r.leader} with leader epoch "
                    f"{old.leader_epoch}->{r.leader_epoch} (a leader change needs a higher epoch)"
                )
        if grows:
            topic.num_partitions += 1
        s = topic.partitions[r.partition] = PartitionRegistration(
            r.replicas, r.leader, r.leader_epoch, r.isr, r.partition_epoch, r.unclean_elected,
            r.adding_replicas, r.removing_replicas)
        if s.is_reassigning:
            self._reassigning.add((r.topic, r.partition))
        else:
            self._reassigning.discard((r.topic, r.partition))

    # -- queries ----------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        info = self.topics.get(topic)
        return None if info is None else info.partitions.get(partition)

    def topic_by_id(self, topic_uuid: bytes) -> TopicInfo | None:
        """The topic whose id is ``topic_uuid`` (never one for the zero UUID)."""
        name = self.topic_names_by_id.get(topic_uuid)
        return None if name is None else self.topics[name]

    def topic_ids(self) -> dict[str, tuple[bytes, int]]:
        """name -> (topic id, partition count) of the topics with an id: built once per
        applied record (O(topics)), then the same dict (callers must not change it)."""
        cached = self._topic_ids
        if cached is None or cached[0] != self.last_applied_offset:
            cached = self._topic_ids = (self.last_applied_offset, {
                name: (info.topic_uuid, info.num_partitions)
                for name, info in self.topics.items() if info.topic_uuid != ZERO_UUID})
        return cached[1]

    def unfenced_brokers(self) -> list[int]:
        return sorted(b for b, info in self.brokers.items() if not info.fenced)

    def is_alive(self, broker_id: int) -> bool:
        info = self.brokers.get(broker_id)
        return info is not None and not info.fenced

    def partitions(self) -> Iterator[tuple[str, int, PartitionRegistration]]:
        """Every partition as ``(topic, index, state)``, topics in name order."""
        for name in sorted(self.topics):
            parts = self.topics[name].partitions
            for index in sorted(parts):
                yield name, index, parts[index]

    def reassigning(self) -> Iterator[tuple[str, int, PartitionRegistration]]:
        """Every partition with a reassignment in flight, as :meth:`partitions` orders
        them.  Cost: O(such partitions), kept by :meth:`apply`."""
        for key in sorted(self._reassigning):
            yield key[0], key[1], self.topics[key[0]].partitions[key[1]]

    def replicas_on(self, broker_id: int) -> Iterator[tuple[str, int, PartitionRegistration]]:
        """Partitions with a replica on ``broker_id`` (what that broker must host)."""
        return ((t, p, s) for t, p, s in self.partitions() if broker_id in s.replicas)

    # -- snapshots --------------------------------------------------------------------

    def to_records(self) -> list[MetadataRecord]:
        """Records that rebuild this image when applied to an empty one."""
        out: list[MetadataRecord] = []
        for b in sorted(self.brokers):
            info = self.brokers[b]
            out.append(RegisterBrokerRecord(b, info.broker_epoch, info.incarnation_id, info.host,
                                            info.port, info.rack, info.internal_host,
                                            info.internal_port))
            if not info.fenced:
                out.append(UnfenceBrokerRecord(b, info.broker_epoch))
        for name in sorted(self.topics):
            t = self.topics[name]
            out.append(TopicRecord(name, t.created_offset, t.num_partitions, t.replication_factor,
                                   dict(t.configs), t.topic_uuid))
            for index in sorted(t.partitions):
                s = t.partitions[index]
                out.append(PartitionRecord(name, index, s.replicas, s.leader, s.leader_epoch,
                                           s.isr, s.partition_epoch, s.unclean_elected,
                                           s.adding_replicas, s.removing_replicas))
        if self.producer_ids is not None:
            out.append(self.producer_ids)
        return out

    @classmethod
    def from_records(cls, records: Iterable[MetadataRecord],
                     last_applied_offset: int) -> MetadataImage:
        image = cls()
        for record in records:
            image._apply(record)
        image.last_applied_offset = last_applied_offset
        return image

    def encode_snapshot(self) -> bytes:
        payload = msgpack.packb([record_to_map(r) for r in self.to_records()], use_bin_type=True)
        return _SNAPSHOT_HEADER.pack(_SNAPSHOT_MAGIC, _SNAPSHOT_VERSION, self.last_applied_offset,
                                     len(payload), crc32c(payload)) + payload

    @classmethod
    def decode_snapshot(cls, data: bytes | bytearray | memoryview) -> MetadataImage:
        """Parse a snapshot file; a bad header, CRC or record -> MetadataRecordError."""
        if len(data) < _SNAPSHOT_HEADER.size:
            raise MetadataRecordError(f"snapshot of {len(data)} bytes is shorter than its header")
        magic, version, offset, length, crc = _SNAPSHOT_HEADER.unpack_from(data)
        if magic != _SNAPSHOT_MAGIC or version != _SNAPSHOT_VERSION:
            raise MetadataRecordError(f"not a version-1 metadata snapshot (magic {magic!r})")
        payload = bytes(data[_SNAPSHOT_HEADER.size :])
        if len(payload) != length or crc32c(payload) != crc:
            raise MetadataRecordError("snapshot payload is truncated or fails its CRC")
        try:
            raw = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        except Exception as e:
            raise MetadataRecordError(f"snapshot payload is not msgpack: {e}") from None
        if type(raw) is not list:
            raise MetadataRecordError("snapshot payload must be an array of records")
        image = cls.from_records((record_from_map(r) for r in raw), offset)
        image.check_invariants()
        return image

    # -- invariants -------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Structural rules at batch boundaries; raises MetadataRecordError."""
        for name, topic in self.topics.items():
            if set(topic.partitions) != set(range(topic.num_partitions)):
                raise MetadataRecordError(
                    f"topic {name!r} has partitions {sorted(topic.partitions)}, expected "
                    f"0..{topic.num_partitions - 1}"
                )
            for index, s in topic.partitions.items():
                where = f"{name}-{index}"
                if not s.isr or not set(s.isr) <= set(s.replicas):
                    raise MetadataRecordError(f"{where}: isr {s.isr} not a non-empty subset of "
                                              f"replicas {s.replicas}")
                if s.leader != NO_LEADER and s.leader not in s.isr:
                    raise MetadataRecordError(f"{where}: leader {s.leader} not in isr {s.isr}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (self.last_applied_offset == other.last_applied_offset
                and self.brokers == other.brokers and self.topics == other.topics
                and self.producer_ids == other.producer_ids)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"MetadataImage(offset={self.last_applied_offset}, brokers={len(self.brokers)}, "
                f"topics={len(self.topics)})")
