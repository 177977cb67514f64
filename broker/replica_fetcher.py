"""Replica fetchers: one asyncio task per source broker, many partitions per Fetch.

A follower partition is added with the leader it follows and starts in the
*truncating* state: the fetcher sends OffsetsForLeaderEpoch (v4) for its latest epoch
and lets :meth:`Partition.truncate_on_leader_answer` cut the log (never to the HW),
asking again until the decision is complete.  Then it is *fetching*: every Fetch (v12,
sessionless: ``session_epoch`` -1) carries ``replica_id`` = this broker and per partition
the ``current_leader_epoch``, its LEO as ``fetch_offset``, its log start offset and, as
Kafka's followers do, ``last_fetched_epoch`` (the epoch of its last batch); returned
batches (``responses[].partitions[].records``) are appended with
:meth:`Partition.append_records_as_follower` (offsets and epochs kept, follower HW =
min(leader HW, own LEO), log start raised to the leader's).

Errors: FENCED_LEADER_EPOCH parks the partition until new metadata re-adds it;
UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION (the leader
has not applied the same metadata yet) are retried after a backoff; a
``diverging_epoch`` in the answer (the leader's log went another way after our last
epoch) goes back to truncation; OFFSET_OUT_OF_RANGE asks the leader's log start
(ListOffsets earliest, as Kafka's follower does, since an error entry carries no
offsets) and restarts the log there when the follower fell behind it, else goes back to
truncation; when that log start falls inside the first batch the leader then sends, the
empty log restarts at the batch's base offset instead (Kafka's rule) and its log start
is raised to the leader's; a lost connection backs off and retries.

This is the adapter around the pure replication core; all decisions are the core's.
Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.async_client import AsyncConnection
from broker.auth import broker_login
from broker.network.tls import client_context
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from replication.partition import Partition
from replication.truncation import EpochEndOffset

if TYPE_CHECKING:
    from broker.core import BrokerCore

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
EARLIEST_TIMESTAMP = -2  # ListOffsets: the log start offset
# Our epoch is older than the leader's: only new metadata can help.  Other errors (the
# leader has not applied the same metadata yet, ...) are retried after a backoff.
PARK_CODES = {ErrorCode.FENCED_LEADER_EPOCH}


@dataclass
class FetchState:
    partition: Partition
    leader_epoch: int
    truncating: bool = True


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader broker."""

    def __init__(self, core: BrokerCore, leader_id: int, host: str, port: int,
                 tls: ssl.SSLContext | None = None) -> None:
        self.core = core
        self.leader_id = leader_id
        self.conn = AsyncConnection(host, port, client_id=f"replica-{core.config.node_id}",
                                    max_frame_bytes=core.config.max_request_bytes * 4,
                                    login=broker_login(core.cluster_secret,
                                                       core.config.node_id),
                                    ssl_context=tls)
        self.states: dict[TopicPartition, FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backoff = False

    def add(self, partition: Partition) -> None:
        key = TopicPartition(partition.topic, partition.index)
        self.states[key] = FetchState(partition, partition.leader_epoch)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: TopicPartition) -> None:
        self.states.pop(key, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self.conn.aclose()

    async def _run(self) -> None:
        while True:
            if not self.states:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self._backoff:
                self._backoff = False
                await asyncio.sleep(BACKOFF_S)
            try:
                if any(s.truncating for s in self.states.values()):
                    await self._truncate()
                if any(not s.truncating for s in self.states.values()):
                    await self._fetch()
            except MiniKafkaError as exc:
                log.info("fetcher for leader %d: %s; retrying", self.leader_id, exc)
                await asyncio.sleep(BACKOFF_S)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(BACKOFF_S)

    def _park(self, key: TopicPartition, code: int) -> None:
        log.info("fetcher for leader %d: %s-%d parked (%s) until new metadata",
                 self.leader_id, key[0], key[1], ErrorCode(code).name)
        self.states.pop(key, None)

    async def _truncate(self) -> None:
        pending = {k: s for k, s in self.states.items() if s.truncating}
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), s in pending.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": s.leader_epoch,
                "leader_epoch": s.partition.truncation_request_epoch})
        body = await self.conn.request(ApiKey.OFFSETS_FOR_LEADER_EPOCH, {
            "replica_id": self.core.config.node_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        for topic in body["topics"]:
            for p in topic["partitions"]:
                key = TopicPartition(topic["name"], p["partition"])
                state = self.states.get(key)
                if state is None or state is not pending.get(key) or not state.truncating:
                    continue  # removed or re-added while the request was in flight
                if p["error_code"]:
                    if p["error_code"] in PARK_CODES:
                        self._park(key, p["error_code"])
                    self._backoff = True
                    continue
                decision = state.partition.truncate_on_leader_answer(
                    EpochEndOffset(p["leader_epoch"], p["end_offset"]))
                if decision.completed:
                    state.truncating = False
                    log.info("%s-%d truncated to %d (%s); fetching from %d", *key,
                             state.partition.log_end_offset, decision.reason, self.leader_id)

    async def _fetch(self) -> None:
        config = self.core.config
        fetching = {k: s for k, s in self.states.items() if not s.truncating}
        sent = {k: s.partition.log_end_offset for k, s in fetching.items()}
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), s in fetching.items():
            topics.setdefault(topic, []).append({
                "partition": index, "current_leader_epoch": s.leader_epoch,
                "fetch_offset": sent[TopicPartition(topic, index)],
                "last_fetched_epoch": s.partition.truncation_request_epoch,
                "log_start_offset": s.partition.log_start_offset,
                "partition_max_bytes": config.replica_fetch_max_bytes})
        body = await self.conn.request(ApiKey.FETCH, {
            "replica_id": config.node_id, "max_wait_ms": config.replica_fetch_wait_max_ms,
            "min_bytes": 1, "max_bytes": config.replica_fetch_max_bytes * 8,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            timeout_ms=config.replica_fetch_wait_max_ms + 30_000)
        if body["error_code"]:
            raise error_for(body["error_code"], f"fetch from leader {self.leader_id}")
        out_of_range: list[TopicPartition] = []
        for topic in body["responses"]:
            for p in topic["partitions"]:
                key = self._on_partition(topic["name"], p, fetching, sent)
                if key is not None:
                    out_of_range.append(key)
        if out_of_range:
            await self._on_out_of_range(out_of_range, fetching)

    def _on_partition(self, topic: str, p: dict[str, Any],
                      fetching: dict[TopicPartition, FetchState],
                      sent: dict[TopicPartition, int]) -> TopicPartition | None:
        """Apply one partition's answer; returns its key when it is OFFSET_OUT_OF_RANGE."""
        key = TopicPartition(topic, p["partition_index"])
        state = self.states.get(key)
        if state is None or state is not fetching.get(key):
            return None  # removed or re-added while the fetch was in flight
        if state.partition.log_end_offset != sent.get(key):
            # the log changed while the fetch was in flight (the scrubber cut a damaged
            # range; a truncation): the answer starts at the old end and would leave a
            # hole - drop it, the next fetch asks from the new end (Kafka's rule too)
            log.info("%s-%d: log end moved from %s to %d during the fetch: answer dropped",
                     *key, sent.get(key), state.partition.log_end_offset)
            return None
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return key
        if code:
            if code in PARK_CODES:
                self._park(key, code)
            self._backoff = True
            return None
        if p["diverging_epoch"] is not None:
            log.info("%s-%d: the leader's log diverges after epoch %d (ends at %d): "
                     "truncating", *key, p["diverging_epoch"]["epoch"],
                     p["diverging_epoch"]["end_offset"])
            state.truncating = True
            return None
        records = p["records"] or b""
        partition = state.partition
        if len(records) and partition.log_end_offset == partition.log_start_offset:
            _pos, first = next(iter_batches(records))
            if first.base_offset < partition.log_end_offset <= first.last_offset:
                # Kafka's rule: the leader's log start (where this empty log restarted)
                # falls inside the first batch; restart at the batch, the log start
                # offset is raised again below from the leader's
                partition.truncate_fully_and_start_at(first.base_offset)
        partition.append_records_as_follower(
            records, p["high_watermark"],
            p["log_start_offset"] if p["log_start_offset"] >= 0 else None)
        self.core.on_follower_progress(key)
        return None

    async def _on_out_of_range(self, keys: list[TopicPartition],
                               fetching: dict[TopicPartition, FetchState]) -> None:
        """Kafka's follower rule: behind the leader's log start -> restart the log there;
        otherwise (ahead of the leader's end, or an epoch it does not know) truncate."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for topic, index in keys:
            topics.setdefault(topic, []).append({
                "partition_index": index, "current_leader_epoch": fetching[
                    TopicPartition(topic, index)].leader_epoch,
                "timestamp": EARLIEST_TIMESTAMP})
        body = await self.conn.request(ApiKey.LIST_OFFSETS, {
            "replica_id": self.core.config.node_id, "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        for topic in body["topics"]:
            for p in topic["partitions"]:
                key = TopicPartition(topic["name"], p["partition_index"])
                state = self.states.get(key)
                if state is None or state is not fetching.get(key):
                    continue
                if p["error_code"]:
                    if p["error_code"] in PARK_CODES:
                        self._park(key, p["error_code"])
                    self._backoff = True
                    continue
                partition = state.partition
                if p["offset"] > partition.log_end_offset:
                    log.info("%s-%d: behind the leader's log start %d: restarting there",
                             *key, p["offset"])
                    partition.truncate_fully_and_start_at(p["offset"])
                else:
                    state.truncating = True


class ReplicaFetcherManager:
    """Keeps one :class:`ReplicaFetcher` per leader broker."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        cfg = core.config
        # brokers of a TLS cluster all speak TLS on their ports (docs/security.md)
        self.tls = (client_context(cfg.ssl_cafile, cfg.ssl_certfile, cfg.ssl_keyfile)
                    if cfg.ssl_certfile else None)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._where: dict[TopicPartition, int] = {}

    def follow(self, partition: Partition, host: str, port: int) -> None:
        key = TopicPartition(partition.topic, partition.index)
        self.unfollow(key)
        leader = partition.leader_id
        fetcher = self.fetchers.get(leader)
        if fetcher is None or (fetcher.conn.host, fetcher.conn.port) != (host, port):
            if fetcher is not None:
                asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = self.fetchers[leader] = ReplicaFetcher(self.core, leader, host, port,
                                                             self.tls)
        fetcher.add(partition)
        self._where[key] = leader

    def unfollow(self, key: TopicPartition) -> None:
        leader = self._where.pop(key, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(key)

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
        self._where.clear()
