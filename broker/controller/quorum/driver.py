"""QuorumDriver: runs one :class:`~replication.raft.replica.KRaftReplica` on the
controller's event loop and the network (the asyncio adapter of the sans-IO replica).

What it does:

* **Timer**: one task polls the replica at its :meth:`~KRaftReplica.next_deadline_ms`
  (or sooner when an event woke it) and sends what the poll returns.
* **Outgoing**: every request the replica returns (Vote, BeginQuorumEpoch, EndQuorumEpoch,
  Fetch, FetchSnapshot) goes to that voter's outbox; one sender task per voter sends them
  one at a time over an :class:`~broker.async_client.AsyncConnection` (logged in with ``login``: the
  voter's SCRAM credentials derived from the cluster secret), each with the replica's
  ``request_timeout_ms``, and feeds the decoded answer to :meth:`KRaftReplica.handle`.  A
  failed or timed-out request is dropped: the replica's timers send it again.  An outbox
  holds at most ``max_queued`` messages (the oldest is dropped past it: Raft tolerates
  lost messages).
* **Incoming**: :meth:`handle_request` is called by the server for Vote,
  BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot and a voter's Fetch of
  ``__cluster_metadata``-0; it feeds the replica and returns the answer body
  synchronously (no ``await``: requests and timer events are applied to the replica one
  at a time).  With ``require_login``, a
  request whose sender id is not the voter the connection logged in as is answered
  CLUSTER_AUTHORIZATION_FAILED and changes nothing (nothing from an unauthenticated
  socket changes quorum state).
* **Commit**: :meth:`propose` appends payloads as leader (flushed by the next poll, which
  it triggers); :meth:`wait_committed` waits, bounded, until the high watermark passes an
  offset in the same epoch; ``on_change`` is called after every event that moved the
  high watermark, the role, the epoch or the log end (the controller applies committed
  records, follows leadership and takes the leader's own LeaderChange entries there).
* :meth:`describe` answers DescribeQuorum from the replica's view (per-voter progress
  only on the leader; timestamps converted to the wall clock).

Bounds: ``max_queued`` per voter outbox; one request in flight per voter; waiters of
:meth:`wait_committed` are bounded by the callers (one per request being answered).
Costs: per event O(voters + entries moved).  Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from broker.async_client import AsyncConnection
from broker.controller.quorum.wire import (
    QUORUM_VERSIONS,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    partition_answer,
)
from broker.metadata.records import METADATA_PARTITION, METADATA_TOPIC
from clients.protocol.errors import ErrorCode, MiniKafkaError
from replication.raft.messages import RaftMessage, Send
from replication.raft.quorum_state import QuorumRole
from replication.raft.replica import KRaftReplica
from timer.clock import Clock

__all__ = ["QuorumDriver"]

log = logging.getLogger(__name__)

Body = dict[str, Any]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class QuorumDriver:
    def __init__(self, replica: KRaftReplica, peers: Mapping[int, tuple[str, int]], *,
                 clock: Clock, login: tuple[str, bytes] | None = None,
                 require_login: bool = False, cluster_id: str | None = None,
                 max_queued: int = 64, on_change: Callable[[], None] | None = None,
                 wall_clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        missing = set(replica.voters) - {replica.node_id} - set(peers)
        if missing:
            raise ValueError(f"no address for voters {sorted(missing)}")
        if max_queued < 1:
            raise ValueError("max_queued must be >= 1")
        self.replica = replica
        self.cluster_id = cluster_id
        self.require_login = require_login
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._on_change = on_change
        others = [v for v in replica.voters if v != replica.node_id]
        client_id = f"controller-{replica.node_id}"
        self._connections = {v: AsyncConnection(*peers[v], client_id=client_id, login=login,
                                                clock=clock) for v in others}
        self._outboxes: dict[int, deque[RaftMessage]] = {v: deque(maxlen=max_queued)
                                                          for v in others}
        self._ready = {v: asyncio.Event() for v in others}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._seen = (replica.high_watermark, replica.role, replica.epoch, replica.leader_id,
                      replica.observer, replica.log.end_offset)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._timer())]
        self._tasks += [loop.create_task(self._sender(v)) for v in self._outboxes]

    async def stop(self, resign_timeout_ms: int = 200) -> None:
        """Hand leadership over (EndQuorumEpoch, best effort) and stop every task."""
        self._stopping = True
        handover = [(s.destination, s.message) for s in self.replica.resign()]
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if handover:
            await asyncio.gather(*(self._send_once(v, m, resign_timeout_ms)
                                   for v, m in handover), return_exceptions=True)
        for conn in self._connections.values():
            conn.close()
        for _offset, _epoch, future in self._waiters:
            if not future.done():
                future.set_result(False)
        self._waiters.clear()

    # -- the application's side ------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.replica.role is QuorumRole.LEADER

    def propose(self, payloads: Sequence[bytes]) -> int | None:
        """Append as leader; the last offset, or None when not the leader."""
        last = self.replica.append(payloads)
        if last is not None:
            self._wake.set()  # the next poll flushes and counts it
        return last

    async def wait_committed(self, offset: int, timeout_ms: int) -> bool:
        """True once the high watermark is past ``offset`` in the current epoch; False on
        timeout or when the epoch changed first (the entry may be lost)."""
        epoch = self.replica.epoch
        if self.replica.high_watermark > offset:
            return True
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (offset, epoch, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await future
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    # -- incoming requests -----------------------------------------------------------

    def handle_request(self, api_key: int, version: int, body: Body,
                       logged_in_voter: int | None) -> Body:
        """The answer to a quorum request from another voter (see the module docstring)."""
        replica = self.replica
        decoded = decode_request(api_key, version, body)
        if decoded is None:
            return partition_answer(api_key, ErrorCode.INVALID_REQUEST, replica.epoch,
                                    replica.leader_id)
        source, message = decoded
        if self.require_login and logged_in_voter != source:
            log.warning("quorum request from voter %s on a connection of %s: refused",
                        source, logged_in_voter)
            return partition_answer(api_key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                    replica.epoch, replica.leader_id)
        if source not in replica.voters or source == replica.node_id:
            return partition_answer(api_key, ErrorCode.INCONSISTENT_VOTER_SET, replica.epoch,
                                    replica.leader_id)
        answer: Body | None = None
        rest: list[Send] = []
        for send in replica.handle(source, message):
            encoded = encode_response(send.message, self._wall_clock_ms()) \
                if send.destination == source and answer is None else None
            if encoded is None:
                rest.append(send)
            else:
                answer = encoded
        self._dispatch(rest)
        return answer if answer is not None else partition_answer(
            api_key, ErrorCode.NONE, replica.epoch, replica.leader_id)

    def describe(self) -> Body:
        """The DescribeQuorum answer (v0-1) of this voter's view; a voter that is an
        observer (its disk was lost, not caught up yet) lists itself in ``observers``."""
        replica = self.replica
        progress = replica.voter_progress()
        now_ms, wall_ms = self._clock.now_ms(), self._wall_clock_ms()
        voters = []
        for v in replica.voters:
            end, fetched = progress.get(v, (-1, None))
            voters.append({"replica_id": v, "log_end_offset": end,
                           "last_fetch_timestamp": -1 if fetched is None or v == replica.node_id
                           else wall_ms - (now_ms - fetched),
                           "last_caught_up_timestamp": -1})
        return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [{
            "partition_index": METADATA_PARTITION, "error_code": 0,
            "leader_id": -1 if replica.leader_id is None else replica.leader_id,
            "leader_epoch": replica.epoch, "high_watermark": replica.high_watermark,
            "current_voters": voters, "observers": [
                {"replica_id": replica.node_id, "log_end_offset": replica.log.end_offset,
                 "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}
            ] if replica.observer else []}]}]}

    # -- the loop --------------------------------------------------------------------

    async def _timer(self) -> None:
        while not self._stopping:
            self._wake.clear()
            self._dispatch(self.replica.poll())
            delay_ms = max(0, self.replica.next_deadline_ms() - self._clock.now_ms())
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay_ms / 1000):
                    await self._wake.wait()

    def _dispatch(self, sends: list[Send]) -> None:
        for send in sends:
            box = self._outboxes.get(send.destination)
            if box is None:
                continue
            if len(box) == box.maxlen:
                log.debug("quorum outbox of voter %d full: dropped the oldest message",
                          send.destination)
            box.append(send.message)
            self._ready[send.destination].set()
        self._after_event()

    def _after_event(self) -> None:
        replica = self.replica
        seen = (replica.high_watermark, replica.role, replica.epoch, replica.leader_id,
                replica.observer, replica.log.end_offset)
        if seen == self._seen:
            return
        self._seen = seen
        self._wake.set()
        for offset, epoch, future in list(self._waiters):
            if future.done():
                continue
            if epoch != replica.epoch:
                future.set_result(False)
            elif replica.high_watermark > offset:
                future.set_result(True)
        if self._on_change is not None:
            self._on_change()

    async def _sender(self, voter: int) -> None:
        box, ready = self._outboxes[voter], self._ready[voter]
        while not self._stopping:
            await ready.wait()
            ready.clear()
            while box:
                message = box.popleft()
                answer = await self._send_once(voter, message,
                                               self.replica.config.request_timeout_ms)
                if answer is not None:
                    self._dispatch(self.replica.handle(voter, answer))

    async def _send_once(self, voter: int, message: RaftMessage,
                         timeout_ms: int) -> RaftMessage | None:
        encoded = encode_request(message, voter, self.cluster_id)
        if encoded is None:
            return None
        api_key, body = encoded
        try:
            answer = await self._connections[voter].request(
                api_key, body, api_version=QUORUM_VERSIONS[api_key], timeout_ms=timeout_ms)
        except (MiniKafkaError, OSError) as e:
            log.debug("quorum %s to voter %d failed: %s", api_key.name, voter, e)
            return None
        try:
            return decode_response(api_key, answer, message)
        except (KeyError, TypeError, ValueError) as e:  # never let an answer end the task
            log.warning("quorum %s answer of voter %d not understood: %r", api_key.name,
                        voter, e)
            return None
