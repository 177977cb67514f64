"""Consumer: assign partitions (or subscribe with a group), seek, poll records (or numpy
columns), iterate.

Fetch path: one Fetch request in flight per leader node (at the connection's highest
common version, Fetch 4-12), for every assigned, unpaused partition led by it that has a
known position and no unconsumed data.  Always a full, sessionless fetch (KIP-227's
``session_id`` 0, ``session_epoch`` -1: the broker keeps no fetch session and answers
for every partition asked), ``isolation_level`` 0 (read_uncommitted)::

    {replica_id: -1, max_wait_ms, min_bytes, max_bytes, isolation_level: 0,
     session_id: 0, session_epoch: -1,
     topics: [{name, partitions: [{partition, fetch_offset, partition_max_bytes}]}]}

Records come from ``responses[].partitions[].records``: whole batches (possibly a
partial batch at the end, which is ignored and fetched again).  A batch may start before the fetch
position (Kafka returns whole batches), so records below the position are skipped.
Fetched data waits in a per-partition slot until ``poll`` / ``poll_bulk`` hands it out;
a slot is discarded if the position moved (seek) in between.  Buffered bytes are bounded
by ``fetch_max_bytes`` per node (nothing new is fetched for a partition with data).

Positions: ``assign`` leaves positions unknown; the first ``poll``/``position`` resolves
them with ListOffsets (1-7; -2 earliest / -1 latest) per ``auto_offset_reset``; with
``"none"`` an unknown position raises :class:`NoOffsetForPartitionError`.  OFFSET_OUT_OF_RANGE
resets the position the same way (or raises :class:`OffsetOutOfRangeError` with
``"none"``).  NOT_LEADER_OR_FOLLOWER and friends refresh the metadata and fetch again.

Offsets of any partition (assigned or not), by ListOffsets to each leader, retried on
leadership errors until the timeout: ``beginning_offsets`` (-2), ``end_offsets`` (-1,
the high watermark), ``offsets_for_times`` (the first offset whose timestamp is at or
after the one given, None where there is none).

Flow control: ``pause`` stops fetching a partition and holds back its buffered records
(kept for ``resume``); positions do not move.  Iteration (``for record in consumer``)
yields one record at a time (its position advances as it is yielded, so a commit never
covers a record not yet handed out) and ends when no record arrived for
``consumer_timeout_ms`` (None: never).

Deserializers: ``key_deserializer`` / ``value_deserializer`` (callables ``bytes ->
object``) apply to records from ``poll`` and iteration, never to a null key or value
(null stays None, as Kafka's standard deserializers return null for null); ``poll_bulk``
returns raw bytes.  A deserializer that raises stops at that record:
:class:`RecordDeserializationError` (naming the partition and offset) is raised, the
records before it are returned first, and the position stays at it (``seek`` past it to
skip it).  ``isolation_level``: "read_uncommitted" only (minikafka has no transactions);
"read_committed" is refused with a clear error until it has.

Compressed batches (gzip, snappy, lz4, zstd) are decompressed by the record codecs
(:mod:`clients.records.compression`) when they are decoded.

Costs: ``poll`` decodes each batch once (O(record bytes), plus a decompression pass for
a compressed batch) and hands records out by index (O(records taken)); ``poll_bulk``
uses the numpy decoder (no per-record Python; values are memoryview slices of the
response frame, or of the decompressed bytes, joined once per poll when there are
several compressed batches).

Groups: with ``group_id``, ``subscribe(topics, listener)`` joins the group and
``poll`` drives rebalances (see :mod:`clients.consumer.coordinator`); after a rebalance
the position of a newly assigned partition is its committed offset, else
``auto_offset_reset``.  ``assign()`` with a ``group_id`` also starts from committed
offsets and commits as a simple (generation -1) commit.  ``enable_auto_commit`` commits
the positions every ``auto_commit_interval_ms`` from ``poll``, before a rebalance revokes
partitions and on ``close`` (which then leaves the group).  Without ``group_id`` no
offsets are committed or read.

Security (Kafka's settings under kafka-python's names): ``security_protocol``
``PLAINTEXT`` (the default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.  SASL_* take
``sasl_mechanism`` (``SCRAM-SHA-256`` / ``SCRAM-SHA-512``), ``sasl_plain_username``,
``sasl_plain_password`` (:mod:`clients.network.sasl`).  SSL and SASL_SSL take
``ssl_cafile`` (PEM CA(s) the brokers' certificates must chain to; default: the system's
CAs), ``ssl_certfile`` with ``ssl_keyfile`` / ``ssl_password`` (a client certificate for
mutual TLS; the password decrypts the key), ``ssl_check_hostname`` (default True: a
broker's certificate must name the host it is reached at, bootstrap or advertised), or a
ready client ``ssl_context`` in place of all of them (:mod:`clients.network.tls`); the
group coordinator and heartbeat connections use the same settings.  Settings that do
not fit the protocol, or files that cannot be read, raise InvalidConfigError here; a
refused login or certificate (:class:`~clients.network.tls.SslAuthenticationError`, an
AuthenticationError) is raised by the call that needed the connection.

Thread safety: none; use a consumer from one thread (like Kafka's).  A subscribed
consumer runs one heartbeat thread of its own.
"""

from __future__ import annotations

import contextlib
import gc
import os
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clients.consumer.assignors import assignor_for
from clients.consumer.coordinator import ConsumerCoordinator, RebalanceListener
from clients.consumer.coordinator_channel import GroupConfig
from clients.consumer.offset_committer import CommitCallback
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.node_connections import NodeConnections
from clients.network.sasl import sasl_login_of
from clients.network.tls import ssl_context_of
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidConfigError,
    MiniKafkaError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    error_for,
)
from clients.protocol.offset_specs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from clients.protocol.request_channel import ClientResponse, InFlightRequest
from clients.protocol.topics import TopicPartition
from clients.records.batch import COMPRESSION_MASK, HEADER_SIZE, read_header
from clients.records.bulk_decode import BulkRecords, concat_bulk, decode_batch_bulk
from clients.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp

__all__ = ["Consumer", "NoOffsetForPartitionError", "RecordDeserializationError"]

_RESETS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
_ISOLATION_LEVELS = {"read_uncommitted": 0}  # read_committed (1) waits for transactions
Deserializer = Callable[[bytes], Any]
_REFRESH = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)


class NoOffsetForPartitionError(MiniKafkaError):
    """A partition has no position and ``auto_offset_reset="none"``."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordDeserializationError(MiniKafkaError):
    """A key or value deserializer raised; the consumer's position is that record's
    offset (``seek(tp, offset + 1)`` skips it).  ``__cause__`` is the original error."""

    code = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, message: str, tp: TopicPartition, offset: int) -> None:
        super().__init__(message)
        self.tp = tp
        self.offset = offset


@dataclass
class _Fetched:
    """Records data of one partition from one fetch response, handed out by poll."""

    fetch_offset: int
    records: memoryview
    high_watermark: int
    decoded: list[ConsumerRecord] | None = None
    index: int = 0  # the next record of ``decoded`` to hand out
    next_offset: int = -1  # offset after the last complete batch (-1: none)
    corrupt: CorruptRecordError | None = None  # the first invalid batch (records stop there)


@dataclass
class _State:
    position: int | None = None
    reset: int | None = None  # pending reset timestamp (-2 earliest / -1 latest)
    fetched: _Fetched | None = None
    high_watermark: int = -1
    committed_pending: bool = False  # group: position comes from the committed offset
    paused: bool = False  # not fetched, buffered records held back


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a fetch's records are built.

    Decoding allocates one tuple per record (tens of thousands per fetch); each
    allocation counts towards the collector's thresholds, and the collections that
    follow rescan the growing list for cycles it cannot hold (the records are tuples of
    ints, strings and bytes).  With it paused and the records built in one list
    comprehension, per-record ``poll()`` of 200k records of 100 B (one partition, RF 3)
    went from ~0.71 to ~0.94 M records/s in one run.  Re-enabled afterwards only if it
    was enabled before (the switch is process-wide: another thread that disables the
    collector while a poll decodes finds it enabled again afterwards).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Consumer:
    """Reads assigned partitions (see the module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str | None = None,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,  # default: max_poll_interval_ms (Kafka)
        partition_assignment_strategy: Sequence[str] = ("range",),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        isolation_level: str = "read_uncommitted",
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        consumer_timeout_ms: float | None = None,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | bytes | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        sasl = sasl_login_of(security_protocol, sasl_mechanism, sasl_plain_username,
                             sasl_plain_password)
        tls = ssl_context_of(security_protocol, ssl_cafile, ssl_certfile, ssl_keyfile,
                             ssl_password, ssl_check_hostname, ssl_context)
        if isolation_level == "read_committed":
            raise InvalidConfigError(
                "isolation_level='read_committed' needs transactions, which minikafka does "
                "not support yet; use 'read_uncommitted' (every record is committed data)"
            )
        if isolation_level not in _ISOLATION_LEVELS:
            raise InvalidConfigError(
                f"isolation_level must be 'read_uncommitted' (or, once transactions exist, "
                f"'read_committed'), got {isolation_level!r}"
            )
        for name, fn in (("key_deserializer", key_deserializer),
                         ("value_deserializer", value_deserializer)):  # fmt: skip
            if fn is not None and not callable(fn):
                raise InvalidConfigError(f"{name} must be callable (bytes -> object), got "
                                         f"{type(fn).__name__}")
        if consumer_timeout_ms is not None and (
            not isinstance(consumer_timeout_ms, int | float)
            or isinstance(consumer_timeout_ms, bool) or not consumer_timeout_ms >= 0
        ):  # fmt: skip
            raise InvalidConfigError(
                f"consumer_timeout_ms must be a number >= 0 or None, got {consumer_timeout_ms!r}")
        if auto_offset_reset not in _RESETS:
            raise InvalidConfigError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
                f"got {auto_offset_reset!r}"
            )
        for name, value, low in (
            ("fetch_min_bytes", fetch_min_bytes, 0), ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
            ("fetch_max_bytes", fetch_max_bytes, 1),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
            ("max_poll_records", max_poll_records, 1),
            ("request_timeout_ms", request_timeout_ms, 1),
        ):  # fmt: skip
            if not isinstance(value, int) or value < low:
                raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")
        self.client_id = client_id or f"consumer-{os.getpid()}-{id(self):x}"
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.isolation_level = isolation_level
        self._isolation = _ISOLATION_LEVELS[isolation_level]
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.consumer_timeout_ms = consumer_timeout_ms
        self._metadata = ClusterMetadata(
            retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms
        )
        self._net = NodeConnections(
            parse_bootstrap(bootstrap_servers), self._metadata, client_id=self.client_id,
            request_timeout_ms=request_timeout_ms, sasl=sasl, ssl_context=tls,
        )  # fmt: skip
        self._states: dict[TopicPartition, _State] = {}
        self._fetches: dict[int, InFlightRequest] = {}  # node -> in-flight Fetch
        self._pending_error: MiniKafkaError | None = None
        self._closed = False
        self._coordinator: ConsumerCoordinator | None = None
        if group_id is not None:
            config = GroupConfig(
                group_id, [assignor_for(n) for n in partition_assignment_strategy],
                group_instance_id, session_timeout_ms,
                max_poll_interval_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
                heartbeat_interval_ms, max_poll_interval_ms, enable_auto_commit,
                auto_commit_interval_ms, request_timeout_ms, retry_backoff_ms,
            )  # fmt: skip
            self._coordinator = ConsumerCoordinator(
                config, self._net, self._metadata, client_id=self.client_id,
                positions=self._positions, set_assignment=self._set_group_assignment,
            )  # fmt: skip

    # ------------------------------------------------------------ assignment & positions
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions kept stay as they were."""
        self._check_open()
        if self.subscription():
            raise MiniKafkaError("assign() after subscribe(): unsubscribe() first",
                                 ErrorCode.INVALID_REQUEST)
        new = [TopicPartition(*tp) for tp in partitions]
        for tp in new:
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"bad partition in {tp!r}")
        self._set_group_assignment(new)

    def _set_group_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        pending = self._coordinator is not None  # with a group: start at committed offsets
        new = list(partitions)
        self._states = {tp: self._states.get(tp) or _State(committed_pending=pending)
                        for tp in new}  # fmt: skip
        self._metadata.add_topics(tp.topic for tp in new)

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def _state(self, tp: TopicPartition) -> _State:
        state = self._states.get(tp)
        if state is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return state

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        state = self._state(tp)
        state.position, state.reset, state.fetched = offset, None, None

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, -2)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, -1)

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, timestamp: int) -> None:
        for tp in self._states if partitions is None else partitions:
            state = self._state(tp)
            state.position, state.reset, state.fetched = None, timestamp, None

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record to return (resolving a pending reset)."""
        state = self._state(tp)
        deadline = self._deadline(self.request_timeout_ms if timeout_ms is None else timeout_ms)
        while state.position is None:
            self._resolve_positions(deadline)
            if state.position is None and time.monotonic() >= deadline:
                raise RequestTimedOutError(f"position of {tp} not resolved in time")
        return state.position

    def high_watermark(self, tp: TopicPartition) -> int:
        """The high watermark seen in the last fetch of ``tp`` (-1 before any)."""
        return self._state(tp).high_watermark

    # ------------------------------------------------------------ flow control
    def pause(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Stop fetching these assigned partitions; their buffered records wait for
        :meth:`resume` (``pause(tp1, tp2)`` or ``pause([tp1, tp2])``)."""
        for tp in _partition_args(partitions):
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Fetch these partitions again (no-op for partitions not paused)."""
        for tp in _partition_args(partitions):
            self._state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions currently paused."""
        return {tp for tp, s in self._states.items() if s.paused}

    # ------------------------------------------------------------ offset lookups
    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """The first offset (log start offset) of each partition."""
        found = self._list_offsets({TopicPartition(*tp): EARLIEST_TIMESTAMP for tp in partitions},
                                   timeout_ms)  # fmt: skip
        return {tp: offset for tp, (offset, _, _) in found.items()}

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """The offset after the last readable record (the high watermark) of each."""
        found = self._list_offsets({TopicPartition(*tp): LATEST_TIMESTAMP for tp in partitions},
                                   timeout_ms)  # fmt: skip
        return {tp: offset for tp, (offset, _, _) in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, the first record whose timestamp (ms) is at or after the
        one given, or None when there is none."""
        query = {}
        for tp, ts in timestamps.items():
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                raise ValueError(f"timestamp for {tp} must be an int >= 0 (ms), got {ts!r}")
            query[TopicPartition(*tp)] = ts
        found = self._list_offsets(query, timeout_ms)
        return {tp: None if offset < 0 else OffsetAndTimestamp(offset, ts, epoch)
                for tp, (offset, ts, epoch) in found.items()}  # fmt: skip

    def _list_offsets(
        self, query: dict[TopicPartition, int], timeout_ms: int | None
    ) -> dict[TopicPartition, tuple[int, int, int]]:
        """ListOffsets to each leader: {tp: (offset, timestamp, leader epoch)}; leadership
        errors refresh the metadata and are retried until the timeout."""
        self._check_open()
        for tp in query:
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"bad partition in {tp!r}")
        deadline = self._deadline(self.request_timeout_ms if timeout_ms is None else timeout_ms)
        out: dict[TopicPartition, tuple[int, int, int]] = {}
        pending = dict(query)
        last: MiniKafkaError | None = None
        while pending:
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                why = f" (last error: {last})" if last is not None else ""
                raise RequestTimedOutError(
                    f"offsets of {sorted(pending)} not found in time{why}")
            topics = sorted({tp.topic for tp in pending})
            try:
                self._net.refresh_metadata(topics, min(remaining_ms, self.request_timeout_ms))
            except MiniKafkaError as e:
                if not e.retriable:
                    raise
                last = e
                time.sleep(min(self.retry_backoff_ms / 1000, max(0.0, remaining_ms / 1000)))
                continue
            by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
            for tp, ts in pending.items():
                leader = self._metadata.leader_for(tp)
                if leader is None:
                    code = self._metadata.topic_error(tp.topic)
                    last = error_for(code or ErrorCode.LEADER_NOT_AVAILABLE, f"{tp}")
                    continue
                by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "timestamp": ts})
            for node, topics_ in by_node.items():
                remaining_ms = max(1.0, (deadline - time.monotonic()) * 1000)
                try:
                    body = self._net.request(node, ApiKey.LIST_OFFSETS, {
                        "replica_id": -1, "isolation_level": self._isolation,
                        "topics": [{"name": t, "partitions": ps} for t, ps in topics_.items()],
                    }, min(remaining_ms, self.request_timeout_ms))  # fmt: skip
                except MiniKafkaError as e:
                    if not e.retriable:
                        raise
                    last = e
                    continue
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        if tp not in pending:
                            continue
                        if p["error_code"] == ErrorCode.NONE:
                            out[tp] = (p["offset"], p["timestamp"], p["leader_epoch"])
                            del pending[tp]
                            continue
                        error = error_for(p["error_code"], f"list offsets of {tp}")
                        if not error.retriable:
                            raise error
                        last = error
            if pending:
                self._metadata.request_update()
                time.sleep(min(self.retry_backoff_ms / 1000,
                               max(0.0, deadline - time.monotonic())))  # fmt: skip
        return out

    # ------------------------------------------------------------ polling
    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from assigned, unpaused partitions (at most ``max_records``, default
        ``max_poll_records``, in all); deserialized when deserializers are set."""
        budget = self.max_poll_records if max_records is None else max_records
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"max_records must be an int >= 1, got {max_records!r}")
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, fetched in self._poll_fetched(timeout_ms):
            try:
                records = self._take_records(tp, fetched, budget)
            except CorruptRecordError:
                if out:  # hand out what this poll has; the next one raises it again
                    break
                raise
            if records:
                out[tp] = records
                budget -= len(records)
            if budget <= 0:
                break
        return out

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> ConsumerRecord:
        """The next record; StopIteration after ``consumer_timeout_ms`` without one."""
        limit = self.consumer_timeout_ms
        deadline = None if limit is None else time.monotonic() + limit / 1000
        while True:
            wait_ms = 1000.0 if deadline is None else (deadline - time.monotonic()) * 1000
            for records in self.poll(max(0, int(min(wait_ms, 1000.0))), max_records=1).values():
                return records[0]
            if deadline is not None and time.monotonic() >= deadline:
                raise StopIteration

    def poll_bulk(self, timeout_ms: int = 0) -> dict[TopicPartition, BulkRecords]:
        """Like poll, as numpy columns per partition (all data fetched for it, not capped
        by ``max_poll_records``); values are zero-copy slices of the response frame."""
        out: dict[TopicPartition, BulkRecords] = {}
        for tp, fetched in self._poll_fetched(timeout_ms):
            try:
                bulk = self._take_bulk(tp, fetched)
            except CorruptRecordError:
                if out:  # hand out what this poll has; the next one raises it again
                    break
                raise
            if bulk is not None:
                out[tp] = bulk
        return out

    def _poll_fetched(self, timeout_ms: int) -> list[tuple[TopicPartition, _Fetched]]:
        self._check_open()
        deadline = self._deadline(timeout_ms)
        if self._coordinator is not None and (self._states or self.subscription()):
            return self._poll_group(self._coordinator, deadline)
        if not self._states:
            raise MiniKafkaError("poll with no assigned partitions", ErrorCode.INVALID_REQUEST)
        return self._fetch_until(deadline)

    def _poll_group(
        self, coordinator: ConsumerCoordinator, deadline: float
    ) -> list[tuple[TopicPartition, _Fetched]]:
        """Drive the group between fetch waits; no records while a rebalance runs."""
        while True:
            now = time.monotonic()
            group_deadline = max(deadline, now + self.retry_backoff_ms / 1000)
            if coordinator.poll(group_deadline) and self._states:
                self._init_committed_positions(group_deadline)
                step = min(deadline, now + coordinator.time_to_next_poll_ms() / 1000)
                ready = self._fetch_until(max(step, time.monotonic()))
                if ready:
                    return ready
            elif time.monotonic() < deadline:  # nothing assigned: just keep membership
                time.sleep(min(deadline - time.monotonic(), self.retry_backoff_ms / 1000))
            if time.monotonic() >= deadline:
                return []

    def _fetch_until(self, deadline: float) -> list[tuple[TopicPartition, _Fetched]]:
        while True:
            self._raise_pending()
            self._resolve_positions(deadline)
            ready = [(tp, s.fetched) for tp, s in self._states.items()
                     if s.fetched is not None and not s.paused]  # fmt: skip
            if ready:
                self._send_fetches()  # pipeline: fetch the other partitions meanwhile
                return ready  # type: ignore[return-value]
            self._send_fetches()
            remaining_ms = (deadline - time.monotonic()) * 1000
            if not self._fetches:  # nothing to wait for but metadata/offsets retries
                remaining_ms = min(remaining_ms, self.retry_backoff_ms)
            for response in self._net.poll(max(0, remaining_ms)):
                self._handle_fetch(response)
            if time.monotonic() >= deadline and not any(
                    s.fetched and not s.paused for s in self._states.values()):
                self._raise_pending()
                return []

    def _take_records(
        self, tp: TopicPartition, fetched: _Fetched, budget: int
    ) -> list[ConsumerRecord]:
        state = self._states[tp]
        if fetched.decoded is None:
            fetched.decoded = self._decode(tp, fetched)
        position = state.position
        assert position is not None
        records = fetched.decoded
        start = fetched.index
        while start < len(records) and records[start].offset < position:
            start += 1
        taken = records[start : start + budget]
        if self.key_deserializer is not None or self.value_deserializer is not None:
            taken = self._deserialize(tp, taken)
        fetched.index = start + len(taken)
        if taken:
            state.position = taken[-1].offset + 1
        elif start >= len(records):
            self._raise_corrupt(state, fetched)
        if fetched.index >= len(records):
            state.fetched = None
            if fetched.next_offset > (state.position or 0):
                state.position = fetched.next_offset  # skip past the last batch's tail
        return taken

    def _deserialize(self, tp: TopicPartition, taken: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Apply the deserializers; on a failure return the records before it (raise if
        it is the first): the position then stays at the failing record."""
        kd, vd = self.key_deserializer, self.value_deserializer
        out: list[ConsumerRecord] = []
        for r in taken:
            try:
                key = r.key if kd is None or r.key is None else kd(r.key)
                value = r.value if vd is None or r.value is None else vd(r.value)
            except Exception as e:
                if out:
                    return out
                raise RecordDeserializationError(
                    f"{tp} offset {r.offset}: cannot deserialize: {type(e).__name__}: {e}; "
                    f"seek to {r.offset + 1} to skip it", tp, r.offset) from e
            out.append(r._replace(key=key, value=value))
        return out

    def _decode(self, tp: TopicPartition, fetched: _Fetched) -> list[ConsumerRecord]:
        """Every record of the fetched batches as a ConsumerRecord (keys and values as
        bytes).  The numpy bulk decoder walks the varints; one copy of the fetched bytes
        (or of a batch's decompressed records) then gives every key and value by a bytes
        slice - about three times the per-record Python decoder's rate.  The cyclic
        garbage collector is paused meanwhile (:func:`_gc_paused`)."""
        with _gc_paused():
            return self._decode_records(tp, fetched)

    def _decode_records(self, tp: TopicPartition, fetched: _Fetched) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        topic, partition = tp.topic, tp.partition
        records = fetched.records
        whole: bytes | None = None  # the fetched bytes, copied once when first needed
        new, record = tuple.__new__, ConsumerRecord
        for pos in self._batch_positions(fetched):
            try:
                bulk = decode_batch_bulk(records, pos)
            except CorruptRecordError as exc:
                self._stop_at_corrupt_batch(tp, fetched, pos, exc)
                break
            if bulk.header.attributes & COMPRESSION_MASK:
                raw = bytes(bulk.buffer)  # the decompressed records
            else:
                if whole is None:
                    whole = bytes(records)
                raw = whole
            first = len(out)
            out += [new(record, (topic, partition, offset, timestamp,
                                 None if kn < 0 else raw[ko : ko + kn],
                                 None if vn < 0 else raw[vo : vo + vn], ()))
                    for offset, timestamp, ko, kn, vo, vn in zip(
                        bulk.offsets.tolist(), bulk.timestamps.tolist(),
                        bulk.key_offsets.tolist(), bulk.key_lengths.tolist(),
                        bulk.value_offsets.tolist(), bulk.value_lengths.tolist(),
                        strict=True)]  # fmt: skip
            for i, headers in bulk.record_headers.items():  # only records that have any
                out[first + i] = out[first + i]._replace(headers=headers)
        return out

    @staticmethod
    def _stop_at_corrupt_batch(tp: TopicPartition, fetched: _Fetched, pos: int,
                               exc: CorruptRecordError) -> None:
        """The records before an invalid batch are handed out; the position then stops
        at it and poll raises an error naming the partition and offsets (as Kafka's
        consumer does) until the application seeks past it."""
        header = read_header(fetched.records, pos)
        fetched.next_offset = header.base_offset  # never skip past it
        fetched.corrupt = CorruptRecordError(
            f"{tp.topic}-{tp.partition}: the record batch at offsets {header.base_offset}.."
            f"{header.next_offset - 1} is invalid ({exc.message}); the records before it "
            f"were delivered; seek to {header.next_offset} to skip it")

    def _raise_corrupt(self, state: _State, fetched: _Fetched) -> None:
        """Raise the fetched data's invalid batch once the records before it are out."""
        error = fetched.corrupt
        if error is None:
            return
        state.fetched = None  # a later poll fetches again from the position: same error
        raise error

    def _take_bulk(self, tp: TopicPartition, fetched: _Fetched) -> BulkRecords | None:
        state = self._states[tp]
        position = state.position
        assert position is not None
        state.fetched = None
        parts = []
        for pos in self._batch_positions(fetched):
            try:
                parts.append(decode_batch_bulk(fetched.records, pos))
            except CorruptRecordError as exc:
                self._stop_at_corrupt_batch(tp, fetched, pos, exc)
                break
        if fetched.next_offset > position:
            state.position = fetched.next_offset
        if not parts:
            self._raise_corrupt(state, fetched)
            return None
        bulk = concat_bulk(parts, position)
        if len(bulk) == 0:
            self._raise_corrupt(state, fetched)
            return None
        state.position = max(state.position or 0, int(bulk.offsets[-1]) + 1)
        return bulk

    @staticmethod
    def _batch_positions(fetched: _Fetched) -> list[int]:
        """Positions of the complete batches (a partial trailing batch is ignored)."""
        view, pos, out = fetched.records, 0, []
        while len(view) - pos >= HEADER_SIZE:
            header = read_header(view, pos)
            if pos + header.size_in_bytes > len(view):
                break
            out.append(pos)
            fetched.next_offset = header.next_offset
            pos += header.size_in_bytes
        if not out and len(view) > 0 and fetched.next_offset < 0:
            # the first batch alone exceeds what the broker returned: cannot progress
            raise CorruptRecordError(
                f"fetch returned {len(view)} bytes without one complete batch; "
                "raise max_partition_fetch_bytes"
            )
        return out

    # ------------------------------------------------------------ fetch requests
    def _send_fetches(self) -> None:
        by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for tp, state in self._states.items():
            if state.position is None or state.fetched is not None or state.paused:
                continue
            leader = self._metadata.leader_for(tp)
            if leader is None:
                self._metadata.request_update()
                continue
            if leader in self._fetches:
                continue
            by_node.setdefault(leader, {}).setdefault(tp.topic, []).append({
                "partition": tp.partition, "fetch_offset": state.position,
                "partition_max_bytes": self.max_partition_fetch_bytes,
            })  # fmt: skip
        for node, topics in by_node.items():
            body = {
                "replica_id": -1,
                "max_wait_ms": self.fetch_max_wait_ms,
                "min_bytes": self.fetch_min_bytes,
                "max_bytes": self.fetch_max_bytes,
                "isolation_level": self._isolation,
                "session_id": 0,  # sessionless full fetch (KIP-227's legacy mode)
                "session_epoch": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            try:
                conn = self._net.get(node)
                request = conn.send(
                    ApiKey.FETCH,
                    body,
                    context=body,
                    timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms,
                )
            except MiniKafkaError:
                self._metadata.request_update()
                continue
            assert request is not None
            self._fetches[node] = request

    def _handle_fetch(self, response: ClientResponse) -> None:
        request = response.request
        if self._fetches.get(request.node_id) is request:
            del self._fetches[request.node_id]
        if request.api_key != ApiKey.FETCH:
            return
        if response.error is not None or response.body is None:
            self._metadata.request_update()
            return
        code = response.body["error_code"]  # v7+: the request as a whole (0 before v7)
        if code != ErrorCode.NONE:
            error = error_for(code, f"fetch from node {request.node_id} failed")
            if error.retriable:
                self._metadata.request_update()
            else:
                self._pending_error = error
            return
        asked = {
            (t["name"], p["partition"]): p["fetch_offset"]
            for t in request.context["topics"] for p in t["partitions"]
        }  # fmt: skip
        for t in response.body["responses"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                state = self._states.get(tp)
                fetch_offset = asked.get(tp)
                if state is None or fetch_offset is None or state.position != fetch_offset:
                    continue  # unassigned or sought meanwhile: stale data
                self._partition_result(tp, state, fetch_offset, p)

    def _partition_result(
        self, tp: TopicPartition, state: _State, fetch_offset: int, p: dict[str, Any]
    ) -> None:
        code = p["error_code"]
        if code == ErrorCode.NONE:
            state.high_watermark = p["high_watermark"]
            if len(p["records"]):
                state.fetched = _Fetched(fetch_offset, p["records"], p["high_watermark"])
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            reset = _RESETS[self.auto_offset_reset]
            if reset is None:
                self._pending_error = OffsetOutOfRangeError(
                    f"fetch offset {fetch_offset} is out of range for {tp} "
                    "and auto_offset_reset='none'"
                )
            else:
                state.position, state.reset = None, reset
            return
        error = error_for(code, f"fetch from {tp} failed")
        if error.retriable:
            self._metadata.request_update()
        else:
            self._pending_error = error

    # ------------------------------------------------------------ offsets & metadata
    def _resolve_positions(self, deadline: float) -> None:
        missing = [tp for tp, s in self._states.items()
                   if s.position is None and not s.committed_pending]  # fmt: skip
        if missing and self.auto_offset_reset == "none":
            unreset = [tp for tp in missing if self._states[tp].reset is None]
            if unreset:
                raise NoOffsetForPartitionError(
                    f"no position for {unreset} and auto_offset_reset='none' (seek first)"
                )
        self._ensure_metadata(deadline)
        if not missing:
            return
        default = _RESETS[self.auto_offset_reset]
        by_node: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for tp in missing:
            leader = self._metadata.leader_for(tp)
            if leader is None:
                self._metadata.request_update()
                continue
            state = self._states[tp]
            ts = state.reset if state.reset is not None else default
            by_node.setdefault(leader, {}).setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "timestamp": ts}
            )
        for node, topics in by_node.items():
            timeout_ms = max(1.0, (deadline - time.monotonic()) * 1000)
            try:
                body = self._net.request(node, ApiKey.LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": self._isolation,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                }, min(timeout_ms, self.request_timeout_ms))  # fmt: skip
            except MiniKafkaError as e:
                if not e.retriable:
                    raise
                self._metadata.request_update()
                continue
            for t in body["topics"]:
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["partition_index"])
                    st = self._states.get(tp)
                    if st is None or st.position is not None:
                        continue
                    if p["error_code"] == ErrorCode.NONE:
                        st.position, st.reset, st.fetched = p["offset"], None, None
                        continue
                    error = error_for(p["error_code"], f"list offsets of {tp}")
                    if not error.retriable:
                        raise error
                    self._metadata.request_update()

    def _ensure_metadata(self, deadline: float) -> None:
        if not self._metadata.update_needed():
            return
        timeout_ms = min(self.request_timeout_ms, (deadline - time.monotonic()) * 1000)
        if timeout_ms <= 0:
            return
        try:
            self._net.refresh_metadata(self._metadata.topics_of_interest, timeout_ms)
        except MiniKafkaError as e:
            if not e.retriable:
                raise

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int] | None:
        """Partition ids of ``topic`` from fresh metadata (None if it does not exist)."""
        self._check_open()
        self._metadata.add_topics([topic])
        self._net.refresh_metadata([topic], timeout_ms or self.request_timeout_ms)
        parts = self._metadata.partitions_for(topic)
        return None if parts is None else [p.partition for p in parts]

    # ------------------------------------------------------------ groups
    def _group(self) -> ConsumerCoordinator:
        self._check_open()
        if self._coordinator is None:
            raise InvalidConfigError("this needs a consumer group: pass group_id=...")
        return self._coordinator

    def subscribe(self, topics: Iterable[str], listener: RebalanceListener | None = None) -> None:
        """Join the group for ``topics``; ``listener.on_partitions_revoked/assigned(set)``
        run inside ``poll``.  Replaces an earlier subscription (not mixable with assign)."""
        group = self._group()
        if isinstance(topics, str):
            topics = [topics]
        if self._states and not group.subscription:
            raise MiniKafkaError("subscribe() after assign(): assign([]) first",
                                 ErrorCode.INVALID_REQUEST)
        group.subscribe(topics, listener)

    def unsubscribe(self) -> None:
        """Revoke the assignment (listener called) and leave the group."""
        self._group().unsubscribe()
        self._states = {}

    def subscription(self) -> set[str]:
        return set(self._coordinator.subscription) if self._coordinator is not None else set()

    def _positions(self) -> dict[TopicPartition, int]:
        return {tp: s.position for tp, s in self._states.items() if s.position is not None}

    def _offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return {tp: OffsetAndMetadata(pos) for tp, pos in self._positions().items()}
        out = {}
        for tp, om in offsets.items():
            om = OffsetAndMetadata(om) if isinstance(om, int) else OffsetAndMetadata(*om)
            if om.offset < 0:
                raise ValueError(f"offset to commit for {tp} must be >= 0, got {om.offset}")
            out[TopicPartition(*tp)] = om
        return out

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: the positions of all assigned partitions) and wait.
        Raises CommitFailedError when the group rebalanced meanwhile."""
        group = self._group()
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        group.commit_sync(self._offsets(offsets), self._deadline(timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """Commit without waiting; ``callback(offsets, error_or_None)`` runs in a poll."""
        self._group().commit_async(self._offsets(offsets), callback)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return self._group().fetch_committed(partitions, self._deadline(timeout))

    def _init_committed_positions(self, deadline: float) -> None:
        pending = [tp for tp, s in self._states.items() if s.committed_pending]
        if not pending or self._coordinator is None:
            return
        try:
            committed = self._coordinator.fetch_committed(pending, deadline)
        except MiniKafkaError as e:
            if e.retriable:
                return  # coordinator busy or moving: the next poll asks again
            raise
        for tp, om in committed.items():
            state = self._states.get(tp)
            if state is None or not state.committed_pending:
                continue
            state.committed_pending = False
            if om is not None and state.position is None and state.reset is None:
                state.position = om.offset

    # ------------------------------------------------------------ misc
    def _raise_pending(self) -> None:
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    def _deadline(self, timeout_ms: float) -> float:
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        return time.monotonic() + timeout_ms / 1000

    def _check_open(self) -> None:
        if self._closed:
            raise MiniKafkaError("consumer is closed", ErrorCode.INVALID_REQUEST)

    def close(self, timeout_ms: int = 30_000) -> None:
        """Commit (auto commit), leave the group, close connections."""
        if not self._closed:
            self._closed = True
            try:
                if self._coordinator is not None:
                    self._coordinator.close(timeout_ms)
            finally:
                self._net.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _partition_args(
    args: tuple[TopicPartition | Iterable[TopicPartition], ...],
) -> list[TopicPartition]:
    """``(tp1, tp2)`` or ``([tp1, tp2],)`` -> ``[tp1, tp2]``."""
    out: list[TopicPartition] = []
    for arg in args:
        if isinstance(arg, TopicPartition) or (
            isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], str)
        ):
            out.append(TopicPartition(*arg))  # type: ignore[misc]
        else:
            out.extend(TopicPartition(*tp) for tp in arg)  # type: ignore[union-attr]
    return out
