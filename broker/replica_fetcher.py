"""Replica fetchers: one asyncio task per source broker, many partitions per Fetch.

The adapter around :class:`replication.follower_fetch.FollowerFetchSession`, which
decides everything (truncation by leader epoch, fetching, parking, diverging epochs,
OFFSET_OUT_OF_RANGE and the leader's log start, answers for replaced states or moved log
ends): this task sends the session's requests over one authenticated connection to the
leader (OffsetsForLeaderEpoch v4, Fetch v17 by topic id - v12 by name for a topic
without one - in a KIP-227 fetch session that a failed request restarts in full,
ListOffsets v7), one at a time, feeds the answers back
(and, for damaged segments under repair, up to
``REPAIR_REQUESTS_PER_ROUND`` consumer Fetches of the range after each replica Fetch),
waits ``BACKOFF_S`` when the session asks for a backoff and after a lost
connection or a top-level error, waits out the replication throttle when only throttled
replicas have something to fetch (one bucket per broker, shared by its fetchers:
``follower_replication_throttled_rate``, :mod:`replication.throttle`; at most
``THROTTLE_RECHECK_S`` at a time, so a rate changed at run time is taken at once), and
sleeps while it follows nothing.

Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.async_client import AsyncConnection
from broker.auth import broker_login
from broker.network.tls import client_context
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import ZERO_UUID, TopicPartition
from replication.follower_fetch import FetchState, FollowerFetchSession
from replication.partition import Partition
from replication.throttle import ReplicationThrottle

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from timer.clock import Clock

log = logging.getLogger(__name__)

BACKOFF_S = 0.1
REPAIR_REQUESTS_PER_ROUND = 16  # x replica_fetch_max_bytes of a damaged range per round
THROTTLE_RECHECK_S = 0.5  # longest wait on the throttle before looking at its rate again


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader broker."""

    def __init__(self, config: BrokerConfig, cluster_secret: str, clock: Clock,
                 on_repaired: Callable[[TopicPartition, int], None], leader_id: int,
                 host: str, port: int, tls: ssl.SSLContext | None = None,
                 throttle: ReplicationThrottle | None = None) -> None:
        self.config = config
        self.leader_id = leader_id
        self.conn = AsyncConnection(host, port, client_id=f"replica-{config.node_id}",
                                    max_frame_bytes=config.max_request_bytes * 4,
                                    login=broker_login(cluster_secret, config.node_id),
                                    ssl_context=tls)
        self.session = FollowerFetchSession(config.node_id, leader_id,
                                            config.replica_fetch_max_bytes,
                                            config.replica_fetch_wait_max_ms,
                                            on_repaired=on_repaired,
                                            clock_ms=clock.now_ms, throttle=throttle)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.bytes_fetched = 0  # record bytes of replica Fetch answers (broker.metrics)

    @property
    def states(self) -> dict[TopicPartition, FetchState]:
        return self.session.states

    def add(self, partition: Partition, topic_id: bytes = ZERO_UUID) -> None:
        self.session.add(partition, topic_id)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: TopicPartition) -> None:
        self.session.remove(key)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        await self.conn.aclose()

    async def _run(self) -> None:
        session = self.session
        while True:
            if not session.states:
                self._wake.clear()
                await self._wake.wait()
                continue
            if session.backoff:
                session.backoff = False
                await asyncio.sleep(BACKOFF_S)
            try:
                await self._truncate()
                await self._fetch()
                await self._repair()
            except MiniKafkaError as exc:
                log.info("fetcher for leader %d: %s; retrying", self.leader_id, exc)
                session.fetch_session.handle_error()  # a full fetch next (KIP-227)
                await asyncio.sleep(BACKOFF_S)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                session.fetch_session.handle_error()
                await asyncio.sleep(BACKOFF_S)

    async def _truncate(self) -> None:
        """One OffsetsForLeaderEpoch round for the truncating partitions (if any)."""
        pending = self.session.truncate_request()
        if pending is not None:
            body = await self.conn.request(pending.api_key, pending.body)
            self.session.on_truncate_response(pending, body)

    async def _fetch(self) -> None:
        """One Fetch for the fetching partitions (if any), and the ListOffsets it needs."""
        pending = self.session.fetch_request()
        if pending is None:
            delay_ms = self.session.throttle_delay_ms()
            if delay_ms:  # only throttled replicas to fetch, and no tokens left; a
                # changed rate (a dynamic broker config) is seen within THROTTLE_RECHECK_S
                await asyncio.sleep(min(delay_ms / 1000, THROTTLE_RECHECK_S))
            return
        body = await self.conn.request(
            pending.api_key, pending.body, api_version=pending.api_version,
            timeout_ms=self.config.replica_fetch_wait_max_ms + 30_000)
        self.bytes_fetched += sum(len(p["records"] or b"") for t in body["responses"]
                                  for p in t["partitions"])
        follow_up = self.session.on_fetch_response(pending, body)
        if follow_up is not None:
            body = await self.conn.request(follow_up.api_key, follow_up.body)
            self.session.on_list_offsets_response(follow_up, body)


    async def _repair(self) -> None:
        """Up to ``REPAIR_REQUESTS_PER_ROUND`` consumer Fetches for the ranges under repair
        (between two replica Fetches, which may wait ``replica_fetch_wait_max_ms``)."""
        for _ in range(REPAIR_REQUESTS_PER_ROUND):
            pending = self.session.repair_request()
            if pending is None or self.session.backoff:
                return
            body = await self.conn.request(pending.api_key, pending.body)
            self.session.on_repair_response(pending, body)


class ReplicaFetcherManager:
    """Keeps one :class:`ReplicaFetcher` per leader broker.  ``on_repaired(key, base)``: a
    damaged segment was written again from the leader's copy
    (:meth:`broker.replica.damage_repair.DamageRepair.on_segment_repaired`)."""

    def __init__(self, config: BrokerConfig, cluster_secret: str, clock: Clock,
                 on_repaired: Callable[[TopicPartition, int], None]) -> None:
        self.config = config
        self.cluster_secret = cluster_secret
        self.clock = clock
        self.on_repaired = on_repaired
        cfg = config
        # brokers of a TLS cluster all speak TLS on their ports (docs/security.md)
        self.tls = (client_context(cfg.ssl_cafile, cfg.ssl_certfile, cfg.ssl_keyfile)
                    if cfg.ssl_certfile else None)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._where: dict[TopicPartition, int] = {}
        self.throttle = ReplicationThrottle(config.follower_replication_throttled_rate,
                                            clock.now_ms)
        self._retired_bytes = 0  # bytes_fetched of fetchers replaced or stopped

    def follow(self, partition: Partition, host: str, port: int,
               topic_id: bytes = ZERO_UUID) -> None:
        """Fetch ``partition`` from its leader at ``host:port`` (by ``topic_id``, its
        topic's id, unless zero)."""
        key = TopicPartition(partition.topic, partition.index)
        self.unfollow(key)
        leader = partition.leader_id
        fetcher = self.fetchers.get(leader)
        if fetcher is None or (fetcher.conn.host, fetcher.conn.port) != (host, port):
            if fetcher is not None:
                self._retired_bytes += fetcher.bytes_fetched
                asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = self.fetchers[leader] = ReplicaFetcher(
                self.config, self.cluster_secret, self.clock, self.on_repaired, leader, host,
                port, self.tls, self.throttle)
        fetcher.add(partition, topic_id)
        self._where[key] = leader

    def following(self, key: TopicPartition) -> bool:
        """``key`` is in its leader's fetcher, truncating or fetching (not parked by a
        FENCED_LEADER_EPOCH answer, not unfollowed)."""
        leader = self._where.get(key)
        fetcher = self.fetchers.get(leader) if leader is not None else None
        return fetcher is not None and key in fetcher.states

    def unfollow(self, key: TopicPartition) -> None:
        leader = self._where.pop(key, None)
        if leader is not None and leader in self.fetchers:
            self.fetchers[leader].remove(key)

    @property
    def replication_bytes_in(self) -> int:
        """Record bytes fetched from leaders so far (Kafka's ReplicationBytesInPerSec)."""
        return self._retired_bytes + sum(f.bytes_fetched for f in self.fetchers.values())

    async def stop(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self._retired_bytes = self.replication_bytes_in
        self.fetchers.clear()
        self._where.clear()
