"""Transaction markers from the coordinator to the partition leaders: a pure queue
(:class:`MarkerQueue`) and its asyncio adapter (:class:`MarkerSender`) that sends
WriteTxnMarkers v2 over the broker's inter-broker connections, as a broker login.

After a PrepareCommit/PrepareAbort is written, the coordinator hands the sender a
:class:`TxnMarker` (producer id and epoch, the result, the coordinator epoch: the leader
epoch of the ``__transaction_state`` partition, and the transaction's partitions) with a
``done`` callback.  The queue groups the partitions still without a marker by their
current leader; the adapter sends one request per leader and feeds the answers back:

| answer for a partition                                   | then                      |
|----------------------------------------------------------|---------------------------|
| NONE                                                     | written                   |
| INVALID_PRODUCER_EPOCH                                   | written (a later epoch    |
|                                                          | was written there: our    |
|                                                          | marker, retried, or one   |
|                                                          | after it)                 |
| UNKNOWN_TOPIC_OR_PARTITION of a partition deleted since  | written (nothing to end)  |
| TRANSACTION_COORDINATOR_FENCED                           | give up the transaction:  |
|                                                          | ``done(False)``, a newer  |
|                                                          | coordinator finishes it   |
| anything else, or no answer (leader moved, connection    | sent again after          |
| lost, timeout)                                           | ``RETRY_BACKOFF_MS``      |

When every partition is written, ``done(True)``: the coordinator writes
CompleteCommit/CompleteAbort.  ``done`` is called at most once per marker, never for a
cancelled one (:meth:`MarkerQueue.cancel`: the coordinator lost the state partition).

Logs: every resend (a partition's retriable error, a leader that does not answer, a
partition without a leader) at INFO through a
:class:`~broker.logs.rate_limit.RateLimitedLog` (keyed by transactional id, partition
and cause; by leader for a failed request), so a leader that is down for a while gives
one line per cause every ``RESEND_LOG_INTERVAL_MS`` with the count suppressed; a fenced
coordinator's giving up at WARNING.

Costs: :meth:`MarkerQueue.requests` O(pending partitions); one request per leader per
round.  Not thread-safe: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.async_client import AsyncConnection
from broker.logs.rate_limit import RateLimitedLog
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestMarker,
    WriteTxnMarkersResponse,
)
from clients.protocol.topics import TopicPartition
from timer.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 100
RESEND_LOG_INTERVAL_MS = 10_000
WRITE_TXN_MARKERS_VERSION = 2
REQUEST_TIMEOUT_MS = 35_000  # the leader answers within its 30 s marker timeout
GONE = -2
"""What ``leader_of`` answers for a partition that no longer exists."""

MarkersDone = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The markers of one transaction's end (one WriteTxnMarkers marker entry per leader)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    transaction_version: int
    partitions: frozenset[TopicPartition]


@dataclass(slots=True)
class _Pending:
    marker: TxnMarker
    done: MarkersDone
    waiting: set[TopicPartition]  # no marker yet, not in flight
    in_flight: set[TopicPartition] = field(default_factory=set)


class MarkerQueue:
    """The transactions whose markers are not all written; see the module docstring."""

    def __init__(self, resends: RateLimitedLog | None = None) -> None:
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count()
        self.resends = resends or RateLimitedLog(log, MonotonicClock(), RESEND_LOG_INTERVAL_MS)

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, marker: TxnMarker, done: MarkersDone) -> int:
        key = next(self._ids)
        self._pending[key] = _Pending(marker, done, set(marker.partitions))
        if not marker.partitions:
            self._finish(key, True)
        return key

    def cancel(self, transactional_ids: set[str]) -> None:
        """Forget the markers of these ids (the coordinator lost their partition)."""
        for key in [k for k, p in self._pending.items()
                    if p.marker.transactional_id in transactional_ids]:
            del self._pending[key]

    def has_waiting(self) -> bool:
        return any(p.waiting for p in self._pending.values())

    def requests(self, leader_of: Callable[[TopicPartition], int | None]
                 ) -> dict[int, list[tuple[int, TxnMarker, list[TopicPartition]]]]:
        """The waiting partitions by leader (now in flight); partitions without a leader
        keep waiting, deleted ones (``GONE``) count as written."""
        by_leader: dict[int, list[tuple[int, TxnMarker, list[TopicPartition]]]] = {}
        for key, pending in list(self._pending.items()):
            groups: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending.waiting):
                leader = leader_of(tp)
                if leader == GONE:
                    pending.waiting.discard(tp)
                elif leader is not None:
                    groups.setdefault(leader, []).append(tp)
                else:
                    self.resends.info((pending.marker.transactional_id, tp, "no leader"),
                                      "%s: marker for %s-%d waits: the partition has no "
                                      "leader", pending.marker.transactional_id, *tp)
            for leader, tps in groups.items():
                pending.waiting.difference_update(tps)
                pending.in_flight.update(tps)
                by_leader.setdefault(leader, []).append((key, pending.marker, tps))
            self._maybe_finish(key)
        return by_leader

    def on_result(self, key: int, results: dict[TopicPartition, ErrorCode]) -> None:
        """The leader's answers for the partitions of marker ``key`` it was sent (a
        partition missing from ``results`` is sent again)."""
        pending = self._pending.get(key)
        if pending is None:
            return
        for tp in list(pending.in_flight):
            code = results.get(tp, ErrorCode.NETWORK_EXCEPTION)
            if code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                log.warning("%s: markers refused (coordinator epoch %d fenced); giving up",
                            pending.marker.transactional_id, pending.marker.coordinator_epoch)
                self._finish(key, False)
                return
            if tp not in results:
                continue
            pending.in_flight.discard(tp)
            if code not in (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH):
                self.resends.info((pending.marker.transactional_id, tp, code),
                                  "%s: marker for %s-%d: %s; resending",
                                  pending.marker.transactional_id, tp.topic, tp.partition,
                                  code.name)
                pending.waiting.add(tp)
        self._maybe_finish(key)

    def on_failure(self, key: int, partitions: list[TopicPartition]) -> None:
        """No answer for ``partitions`` of marker ``key``: send them again."""
        pending = self._pending.get(key)
        if pending is None:
            return
        for tp in partitions:
            if tp in pending.in_flight:
                pending.in_flight.discard(tp)
                pending.waiting.add(tp)

    def _maybe_finish(self, key: int) -> None:
        pending = self._pending.get(key)
        if pending is not None and not pending.waiting and not pending.in_flight:
            self._finish(key, True)

    def _finish(self, key: int, written: bool) -> None:
        pending = self._pending.pop(key)
        pending.done(written)


def request_body(batch: list[tuple[int, TxnMarker, list[TopicPartition]]]
                 ) -> WriteTxnMarkersRequest:
    markers: list[WriteTxnMarkersRequestMarker] = []
    for _key, marker, tps in batch:
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        markers.append({"producer_id": marker.producer_id,
                        "producer_epoch": marker.producer_epoch,
                        "transaction_result": marker.committed,
                        "topics": [{"name": t, "partition_indexes": p}
                                   for t, p in by_topic.items()],
                        "coordinator_epoch": marker.coordinator_epoch,
                        "transaction_version": marker.transaction_version})
    return {"markers": markers}


def response_results(batch: list[tuple[int, TxnMarker, list[TopicPartition]]],
                     response: WriteTxnMarkersResponse
                     ) -> list[tuple[int, dict[TopicPartition, ErrorCode]]]:
    """Each marker's per-partition answers (matched by position, then producer id)."""
    answers = response.get("markers") or []
    out: list[tuple[int, dict[TopicPartition, ErrorCode]]] = []
    for i, (key, marker, _tps) in enumerate(batch):
        results: dict[TopicPartition, ErrorCode] = {}
        if i < len(answers) and answers[i].get("producer_id") == marker.producer_id:
            for topic in answers[i].get("topics") or []:
                for part in topic.get("partitions") or []:
                    try:
                        code = ErrorCode(part["error_code"])
                    except ValueError:
                        code = ErrorCode.UNKNOWN_SERVER_ERROR
                    results[TopicPartition(topic["name"], part["partition_index"])] = code
        out.append((key, results))
    return out


class MarkerSender:
    """The asyncio adapter of :class:`MarkerQueue`: one connection per leader broker
    (a broker login: ``login``), one WriteTxnMarkers per leader per round; started by
    the first :meth:`send`, stopped by :meth:`stop`.  ``leader_of`` and ``endpoint_of``
    are asked on every round (the metadata changes)."""

    def __init__(self, node_id: int, login: tuple[str, bytes] | None,
                 leader_of: Callable[[TopicPartition], int | None],
                 endpoint_of: Callable[[int], tuple[str, int] | None], clock: Clock,
                 tls: ssl.SSLContext | None = None) -> None:
        self.node_id = node_id
        self.login = login
        self.leader_of = leader_of
        self.endpoint_of = endpoint_of
        self.tls = tls
        self.queue = MarkerQueue(RateLimitedLog(log, clock, RESEND_LOG_INTERVAL_MS))
        self._connections: dict[int, AsyncConnection] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def send(self, marker: TxnMarker, done: MarkersDone) -> None:
        self.queue.add(marker, done)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        assert self._wake is not None
        self._wake.set()

    def cancel(self, transactional_ids: set[str]) -> None:
        self.queue.cancel(transactional_ids)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            rounds = self.queue.requests(self.leader_of)
            if rounds:
                await asyncio.gather(*(self._send_to(leader, batch)
                                       for leader, batch in rounds.items()))
            if self.queue.has_waiting():
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)  # backoff before a retry
                self._wake.set()

    def _connection(self, node_id: int) -> AsyncConnection | None:
        endpoint = self.endpoint_of(node_id)
        if endpoint is None:
            return None
        conn = self._connections.get(node_id)
        if conn is None or (conn.host, conn.port) != endpoint:
            if conn is not None:
                conn.close()
            conn = AsyncConnection(endpoint[0], endpoint[1],
                                   client_id=f"txn-markers-{self.node_id}",
                                   login=self.login, ssl_context=self.tls)
            self._connections[node_id] = conn
        return conn

    async def _send_to(self, leader: int,
                       batch: list[tuple[int, TxnMarker, list[TopicPartition]]]) -> None:
        conn = self._connection(leader)
        try:
            if conn is None:
                raise MiniKafkaError(f"broker {leader} has no endpoint")
            answer = await conn.request(ApiKey.WRITE_TXN_MARKERS, dict(request_body(batch)),
                                        api_version=WRITE_TXN_MARKERS_VERSION,
                                        timeout_ms=REQUEST_TIMEOUT_MS)
        except (MiniKafkaError, OSError) as exc:
            self.queue.resends.info(("request", leader, type(exc).__name__),
                                    "WriteTxnMarkers to broker %d failed: %s; resending %d "
                                    "markers", leader, exc, len(batch))
            for key, _marker, tps in batch:
                self.queue.on_failure(key, tps)
            return
        except Exception:  # a bug must not stop every later marker: log, retry
            log.exception("WriteTxnMarkers to broker %d failed; retrying", leader)
            for key, _marker, tps in batch:
                self.queue.on_failure(key, tps)
            return
        try:
            results_by_marker = response_results(batch, answer)  # type: ignore[arg-type]
        except Exception:  # a malformed answer: send again
            log.exception("WriteTxnMarkers answer of broker %d unreadable", leader)
            results_by_marker = []
        for key, results in results_by_marker:
            self.queue.on_result(key, results)
        for key, _marker, tps in batch:  # partitions the answer left out
            self.queue.on_failure(key, tps)

    def stop(self) -> None:
        """Stop sending (shutdown): the task is cancelled, the connections closed."""
        if self._task is not None:
            self._task.cancel()
        for conn in self._connections.values():
            conn.close()
