"""Consumer: assign partitions (or subscribe with a group), seek, poll records (or numpy
columns), iterate.

The parts (Kafka's and aiokafka's split): :mod:`clients.consumer.subscription_state`
(the assigned partitions, each one's position state machine and pause flag),
:mod:`clients.consumer.fetcher` (Fetch requests, fetched data, decoding),
:mod:`clients.consumer.offset_fetcher` (ListOffsets: resets and offset look-ups) and,
with a group, :mod:`clients.consumer.coordinator`.  This class is the facade: it checks
arguments, owns the connections and drives the parts from ``poll``.

Fetch path (:mod:`clients.consumer.fetcher`): one sessionless Fetch in flight per leader
node for every assigned, unpaused partition with a known position and no unconsumed
data; fetched data waits per partition until ``poll`` / ``poll_bulk`` hands it out and
is discarded if the position moved (seek) in between.  NOT_LEADER_OR_FOLLOWER and
friends refresh the metadata and fetch again.

Positions: ``assign`` leaves positions unknown; the first ``poll``/``position`` resolves
them with ListOffsets (1-7; -2 earliest / -1 latest) per ``auto_offset_reset``; with
``"none"`` an unknown position raises
:class:`~clients.consumer.offset_fetcher.NoOffsetForPartitionError`.  OFFSET_OUT_OF_RANGE
resets the position the same way (or raises :class:`OffsetOutOfRangeError` with
``"none"``).

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
:class:`~clients.consumer.fetcher.RecordDeserializationError` (naming the partition and
offset) is raised, the records before it are returned first, and the position stays at
it (``seek`` past it to skip it).  ``isolation_level``: "read_uncommitted" (the
default, as Kafka's) or "read_committed": only records of committed transactions (and
non-transactional ones) are returned, up to the last stable offset; ``end_offsets`` /
``seek_to_end`` answer the last stable offset (:mod:`clients.consumer.aborted_transactions`).
Transaction markers are never returned.  ``group_metadata()`` is the group membership a
transactional producer's ``send_offsets_to_transaction`` takes.

Compressed batches (gzip, snappy, lz4, zstd) are decompressed by the record codecs
(:mod:`clients.records.compression`) when they are decoded.

Costs: ``poll`` decodes each batch once (O(record bytes), plus a decompression pass for
a compressed batch) and hands records out by index (O(records taken)); ``poll_bulk``
uses the numpy decoder (no per-record Python; values are memoryview slices of the
response frame, or of the decompressed bytes, joined once per poll when there are
several compressed batches).

Groups: with ``group_id``, ``subscribe(topics, listener)`` joins the group (KIP-848 also
``subscribe(pattern=...)``: a ``str`` or flag-less ``re.Pattern`` the broker resolves,
RE2 syntax, to the topics it fully matches and the member may Describe, topics created
later included; the classic protocol refuses it: not done) and
``poll`` drives rebalances (``group_protocol`` "classic": :mod:`clients.consumer.coordinator`;
"consumer": KIP-848, :mod:`clients.consumer.membership.group_member`); after a rebalance
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

Time: every deadline of the consumer and its parts is in seconds on one clock (the
monotonic clock), passed in at construction to the cluster metadata, the offset fetcher
and the group coordinator client (with its channel and heartbeat thread); none of them
reads the system clock itself.

Thread safety: none; use a consumer from one thread (like Kafka's).  A subscribed
consumer runs one heartbeat thread of its own.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from clients.consumer.assignors import assignor_for
from clients.consumer.coordinator import RebalanceListener
from clients.consumer.coordinator_channel import GroupConfig
from clients.consumer.fetcher import CompletedFetch, Deserializer, Fetcher
from clients.consumer.membership.group_member import GroupMembership, Pattern, group_membership
from clients.consumer.offset_committer import CommitCallback
from clients.consumer.offset_fetcher import RESET_TIMESTAMPS, OffsetFetcher
from clients.consumer.subscription_state import PositionState, SubscriptionState
from clients.network.cluster_metadata import ClusterMetadata, parse_bootstrap
from clients.network.node_connections import NodeConnections
from clients.network.sasl import sasl_login_of
from clients.network.tls import ssl_context_of
from clients.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidConfigError,
    MiniKafkaError,
    RequestTimedOutError,
)
from clients.protocol.offset_specs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from clients.protocol.topics import TopicPartition
from clients.records.bulk_decode import BulkRecords
from clients.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
)

__all__ = ["Consumer"]

_ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


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
        group_protocol: str = "classic",  # "consumer": KIP-848 (clients.consumer.membership)
        group_remote_assignor: str | None = None,  # KIP-848: "uniform", "range"; None: broker's
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
        _check_settings(isolation_level, key_deserializer, value_deserializer,
                        consumer_timeout_ms, auto_offset_reset, (
            ("fetch_min_bytes", fetch_min_bytes, 0), ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
            ("fetch_max_bytes", fetch_max_bytes, 1),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
            ("max_poll_records", max_poll_records, 1),
            ("request_timeout_ms", request_timeout_ms, 1),
        ))  # fmt: skip
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
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.consumer_timeout_ms = consumer_timeout_ms
        self._clock = clock = time.monotonic  # seconds; every part reads this one clock
        self._metadata = ClusterMetadata(retry_backoff_ms=retry_backoff_ms,
                                         metadata_max_age_ms=metadata_max_age_ms, clock=clock)
        self._net = NodeConnections(
            parse_bootstrap(bootstrap_servers), self._metadata, client_id=self.client_id,
            request_timeout_ms=request_timeout_ms, sasl=sasl, ssl_context=tls,
        )  # fmt: skip
        isolation = _ISOLATION_LEVELS[isolation_level]
        self._subscriptions: SubscriptionState[CompletedFetch] = SubscriptionState()
        self._fetcher = Fetcher(self, self._subscriptions, self._metadata, self._net,
                                isolation=isolation)
        self._offsets_fetcher = OffsetFetcher(self, self._subscriptions, self._metadata,
                                              self._net, isolation=isolation, clock=clock)
        self._closed = False
        self._coordinator: GroupMembership | None = None
        if group_id is not None:
            config = GroupConfig(
                group_id, [assignor_for(n) for n in partition_assignment_strategy],
                group_instance_id, session_timeout_ms,
                max_poll_interval_ms if rebalance_timeout_ms is None else rebalance_timeout_ms,
                heartbeat_interval_ms, max_poll_interval_ms, enable_auto_commit,
                auto_commit_interval_ms, request_timeout_ms, retry_backoff_ms)
            self._coordinator = group_membership(
                group_protocol, config, self._net, self._metadata, client_id=self.client_id,
                positions=self._subscriptions.positions, set_assignment=self._set_group_assignment,
                clock=clock, remote_assignor=group_remote_assignor)

    # ------------------------------------------------------------ assignment & positions
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Replace the assignment; positions of partitions kept stay as they were."""
        self._check_open()
        if self._coordinator is not None and self._coordinator.subscribed:
            raise MiniKafkaError("assign() after subscribe(): unsubscribe() first",
                                 ErrorCode.INVALID_REQUEST)
        new = [TopicPartition(*tp) for tp in partitions]
        for tp in new:
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"bad partition in {tp!r}")
        self._set_group_assignment(new)

    def _set_group_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        new = list(partitions)
        # with a group: start at committed offsets
        self._subscriptions.assign(new, from_committed=self._coordinator is not None)
        self._metadata.add_topics(tp.topic for tp in new)

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assignment()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an int >= 0, got {offset!r}")
        self._subscriptions.state(tp).seek(offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, EARLIEST_TIMESTAMP)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, LATEST_TIMESTAMP)

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, timestamp: int) -> None:
        subscriptions = self._subscriptions
        for tp in list(subscriptions.states) if partitions is None else partitions:
            subscriptions.state(tp).request_reset(timestamp)

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record to return (resolving a pending reset)."""
        state = self._subscriptions.state(tp)
        deadline = self._deadline(self.request_timeout_ms if timeout_ms is None else timeout_ms)
        while state.position is None:
            self._offsets_fetcher.resolve_positions(deadline)
            if state.position is None and self._clock() >= deadline:
                raise RequestTimedOutError(f"position of {tp} not resolved in time")
        return state.position

    def high_watermark(self, tp: TopicPartition) -> int:
        """The high watermark seen in the last fetch of ``tp`` (-1 before any)."""
        return self._subscriptions.state(tp).high_watermark

    # ------------------------------------------------------------ flow control
    def pause(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Stop fetching these assigned partitions (``pause(tp1, tp2)`` or a list)."""
        self._subscriptions.pause(_partition_args(partitions))

    def resume(self, *partitions: TopicPartition | Iterable[TopicPartition]) -> None:
        """Fetch these partitions again (no-op for partitions not paused)."""
        self._subscriptions.resume(_partition_args(partitions))

    def paused(self) -> set[TopicPartition]:
        """The assigned partitions currently paused."""
        return self._subscriptions.paused()

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
        """The offset after the last readable record of each (read_committed: the LSO)."""
        found = self._list_offsets({TopicPartition(*tp): LATEST_TIMESTAMP for tp in partitions},
                                   timeout_ms)  # fmt: skip
        return {tp: offset for tp, (offset, _, _) in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first record at or after the timestamp (ms), or None."""
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
        self._check_open()
        for tp in query:
            if not isinstance(tp.partition, int) or tp.partition < 0:
                raise ValueError(f"bad partition in {tp!r}")
        deadline = self._deadline(self.request_timeout_ms if timeout_ms is None else timeout_ms)
        return self._offsets_fetcher.list_offsets(query, deadline)

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int] | None:
        """Partition ids of ``topic`` from fresh metadata (None if it does not exist)."""
        self._check_open()
        self._metadata.add_topics([topic])
        self._net.refresh_metadata([topic], timeout_ms or self.request_timeout_ms)
        parts = self._metadata.partitions_for(topic)
        return None if parts is None else [p.partition for p in parts]

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
        take_records = self._fetcher.take_records
        for tp, fetched in self._poll_fetched(timeout_ms):
            try:
                records = take_records(tp, fetched, budget)
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
        deadline = None if limit is None else self._clock() + limit / 1000
        while True:
            wait_ms = 1000.0 if deadline is None else (deadline - self._clock()) * 1000
            for records in self.poll(max(0, int(min(wait_ms, 1000.0))), max_records=1).values():
                return records[0]
            if deadline is not None and self._clock() >= deadline:
                raise StopIteration

    def poll_bulk(self, timeout_ms: int = 0) -> dict[TopicPartition, BulkRecords]:
        """Like poll, as numpy columns per partition (all fetched data, not capped; zero-copy)."""
        out: dict[TopicPartition, BulkRecords] = {}
        for tp, fetched in self._poll_fetched(timeout_ms):
            try:
                bulk = self._fetcher.take_bulk(tp, fetched)
            except CorruptRecordError:
                if out:  # hand out what this poll has; the next one raises it again
                    break
                raise
            if bulk is not None:
                out[tp] = bulk
        return out

    def _poll_fetched(self, timeout_ms: int) -> list[tuple[TopicPartition, CompletedFetch]]:
        self._check_open()
        deadline = self._deadline(timeout_ms)
        if self._coordinator is not None and (self._subscriptions.states
                                              or self._coordinator.subscribed):
            return self._poll_group(self._coordinator, deadline)
        if not self._subscriptions.states:
            raise MiniKafkaError("poll with no assigned partitions", ErrorCode.INVALID_REQUEST)
        return self._fetch_until(deadline)

    def _poll_group(
        self, coordinator: GroupMembership, deadline: float
    ) -> list[tuple[TopicPartition, CompletedFetch]]:
        """Drive the group between fetch waits; no records while a rebalance runs."""
        while True:
            now = self._clock()
            group_deadline = max(deadline, now + self.retry_backoff_ms / 1000)
            if coordinator.poll(group_deadline) and self._subscriptions.states:
                self._init_committed_positions(group_deadline)
                step = min(deadline, now + coordinator.time_to_next_poll_ms() / 1000)
                ready = self._fetch_until(max(step, self._clock()))
                if ready:
                    return ready
            elif self._clock() < deadline:  # nothing assigned: just keep membership
                time.sleep(min(deadline - self._clock(), self.retry_backoff_ms / 1000))
            if self._clock() >= deadline:
                return []

    def _fetch_until(self, deadline: float) -> list[tuple[TopicPartition, CompletedFetch]]:
        fetcher = self._fetcher
        while True:
            states = self._subscriptions.states  # inlined queries: iteration polls per record
            fetcher.raise_pending()
            self._offsets_fetcher.resolve_positions(deadline)
            ready = [(tp, s.fetched) for tp, s in states.items()
                     if s.fetched is not None and not s.paused]  # fmt: skip
            if ready:
                fetcher.send_fetches()  # pipeline: fetch the other partitions meanwhile
                return ready  # type: ignore[return-value]
            fetcher.send_fetches()
            remaining_ms = (deadline - self._clock()) * 1000
            if not fetcher.in_flight:  # nothing to wait for but metadata/offsets retries
                remaining_ms = min(remaining_ms, self.retry_backoff_ms)
            for response in self._net.poll(max(0, remaining_ms)):
                fetcher.handle_fetch(response)
            if self._clock() >= deadline and not any(
                    s.fetched and not s.paused for s in states.values()):
                fetcher.raise_pending()
                return []

    # ------------------------------------------------------------ groups
    def _group(self) -> GroupMembership:
        self._check_open()
        if self._coordinator is None:
            raise InvalidConfigError("this needs a consumer group: pass group_id=...")
        return self._coordinator

    def group_metadata(self) -> ConsumerGroupMetadata:  # Kafka's groupMetadata() (module doc)
        return self._group().group_metadata()

    def subscribe(self, topics: Iterable[str] = (), listener: RebalanceListener | None = None,
                  *, pattern: Pattern | None = None) -> None:
        """Join the group for ``topics`` or ``pattern`` (module docstring); the listener
        runs inside ``poll``.  Replaces an earlier subscription (not mixable with assign)."""
        group = self._group()
        if self._subscriptions.states and not group.subscribed:
            raise MiniKafkaError("subscribe() after assign(): assign([]) first",
                                 ErrorCode.INVALID_REQUEST)
        group.subscribe([topics] if isinstance(topics, str) else topics, listener, pattern)

    def unsubscribe(self) -> None:
        """Revoke the assignment (listener called) and leave the group."""
        self._group().unsubscribe()
        self._subscriptions.clear()

    def subscription(self) -> set[str]:
        """The subscribed topics (with a pattern: those assigned, as Kafka's)."""
        return set(self._coordinator.subscription) if self._coordinator is not None else set()

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
               timeout_ms: int | None = None) -> None:
        """Commit ``offsets`` (default: the positions of all assigned partitions) and wait.
        Raises CommitFailedError when the group rebalanced meanwhile."""
        group = self._group()
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        to_commit = _offsets_to_commit(offsets, self._subscriptions.positions)
        group.commit_sync(to_commit, self._deadline(timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: CommitCallback | None = None) -> None:
        """Commit without waiting; ``callback(offsets, error_or_None)`` runs in a poll."""
        group = self._group()
        group.commit_async(_offsets_to_commit(offsets, self._subscriptions.positions), callback)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return self._group().fetch_committed(partitions, self._deadline(timeout))

    def _init_committed_positions(self, deadline: float) -> None:
        """Partitions INITIALIZING take the group's committed offset (or await a reset)."""
        pending = self._subscriptions.awaiting(PositionState.INITIALIZING)
        if not pending or self._coordinator is None:
            return
        try:
            committed = self._coordinator.fetch_committed(pending, deadline)
        except MiniKafkaError as e:
            if e.retriable:
                return  # coordinator busy or moving: the next poll asks again
            raise
        self._subscriptions.apply_committed(
            {tp: None if om is None else om.offset for tp, om in committed.items()})

    # ------------------------------------------------------------ misc
    def _deadline(self, timeout_ms: float) -> float:
        if timeout_ms < 0:
            raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
        return self._clock() + timeout_ms / 1000

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


def _check_settings(
    isolation_level: str, key_deserializer: Deserializer | None,
    value_deserializer: Deserializer | None, consumer_timeout_ms: float | None,
    auto_offset_reset: str, bounded_ints: tuple[tuple[str, int, int], ...],
) -> None:
    """Refuse settings the consumer cannot honour (InvalidConfigError naming the setting);
    ``bounded_ints``: (name, value, lowest allowed)."""
    if isolation_level not in _ISOLATION_LEVELS:
        raise InvalidConfigError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', "
            f"got {isolation_level!r}"
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
    if auto_offset_reset not in RESET_TIMESTAMPS:
        raise InvalidConfigError(
            f"auto_offset_reset must be 'earliest', 'latest' or 'none', "
            f"got {auto_offset_reset!r}"
        )
    for name, value, low in bounded_ints:
        if not isinstance(value, int) or value < low:
            raise InvalidConfigError(f"{name} must be an int >= {low}, got {value!r}")


def _offsets_to_commit(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None,
    positions: Callable[[], dict[TopicPartition, int]],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """``commit``'s argument as OffsetAndMetadata (None: the current positions)."""
    if offsets is None:
        return {tp: OffsetAndMetadata(pos) for tp, pos in positions().items()}
    out = {}
    for tp, om in offsets.items():
        om = OffsetAndMetadata(om) if isinstance(om, int) else OffsetAndMetadata(*om)
        if om.offset < 0:
            raise ValueError(f"offset to commit for {tp} must be >= 0, got {om.offset}")
        out[TopicPartition(*tp)] = om
    return out

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
