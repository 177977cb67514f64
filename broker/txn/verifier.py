"""KIP-890 part 1, the partition leader's side: asks a transactional id's coordinator
whether partitions are in the producer's ongoing transaction (the client side of
AddPartitionsToTxn v4+ ``verify_only``), batched per coordinator broker.

:class:`RemoteTxnVerifier` is used by :class:`broker.txn.state_topic.TransactionStateTopic`
when the id's coordinator is another broker (an id coordinated here is answered in
process).  Every question asked while a request to that broker is being prepared (the
same event-loop turn) or in flight goes out in the next request, one
``transactions`` entry per transactional id (questions for the same id, producer and
epoch are merged), over one connection per coordinator broker logged in as this
broker.  Each question gets its partitions' answers; a lost connection, a timeout or a
top-level error answers every partition of the request with NETWORK_EXCEPTION or that
error (the produce path maps them to retriable produce errors).

No cache of answers: a "yes" for (id, producer, epoch, partition) could outlive its
transaction (transaction version 0/1 keeps the epoch across transactions) and let a
late batch open a hanging transaction, which is what verification prevents; the leader
asks only for a producer's first transactional batch on a partition anyway.  Where the
coordinator is comes from the metadata (no FindCoordinator round trip).

Costs: one request per coordinator broker per batch; O(partitions) per question.  Not
thread-safe: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass, field

from broker.async_client import AsyncConnection
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    AddPartitionsToTxnRequestTransaction,
    AddPartitionsToTxnResponse,
)
from clients.protocol.topics import TopicPartition

log = logging.getLogger(__name__)

VERIFY_VERSION = 4
VERIFY_TIMEOUT_MS = 5_000

Results = dict[TopicPartition, ErrorCode]
_Key = tuple[str, int, int]  # transactional id, producer id, epoch


@dataclass(slots=True)
class _Batch:
    """The questions for one coordinator broker not sent yet."""

    partitions: dict[_Key, set[TopicPartition]] = field(default_factory=dict)
    waiters: list[tuple[_Key, list[TopicPartition], asyncio.Future[Results]]] = field(
        default_factory=list)


def verify_body(partitions: dict[_Key, set[TopicPartition]]
                ) -> list[AddPartitionsToTxnRequestTransaction]:
    """The ``transactions`` of one AddPartitionsToTxn v4 (one entry per key)."""
    out: list[AddPartitionsToTxnRequestTransaction] = []
    for (tid, pid, epoch), tps in partitions.items():
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        out.append({"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()]})
    return out


def answers_of(response: AddPartitionsToTxnResponse) -> dict[str, Results]:
    """Per transactional id, the answer of each partition (an unknown code:
    UNKNOWN_SERVER_ERROR)."""
    out: dict[str, Results] = {}
    for txn in response.get("results_by_transaction") or []:
        results = out.setdefault(txn["transactional_id"], {})
        for topic in txn.get("topic_results") or []:
            for part in topic.get("results_by_partition") or []:
                try:
                    code = ErrorCode(part["partition_error_code"])
                except ValueError:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                results[TopicPartition(topic["name"], part["partition_index"])] = code
    return out


class RemoteTxnVerifier:
    """Batched verify-only AddPartitionsToTxn to the coordinator brokers."""

    def __init__(self, node_id: int, login: tuple[str, bytes] | None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.node_id = node_id
        self.login = login
        self.tls = tls
        self._batches: dict[int, _Batch] = {}
        self._connections: dict[int, AsyncConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def verify(self, coordinator: int, endpoint: tuple[str, int],
                     transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> Results:
        key = (transactional_id, producer_id, producer_epoch)
        batch = self._batches.get(coordinator)
        if batch is None:
            batch = self._batches[coordinator] = _Batch()
            asyncio.get_running_loop().call_soon(self._flush, coordinator, endpoint)
        batch.partitions.setdefault(key, set()).update(partitions)
        future: asyncio.Future[Results] = asyncio.get_running_loop().create_future()
        batch.waiters.append((key, partitions, future))
        return await future

    def _flush(self, coordinator: int, endpoint: tuple[str, int]) -> None:
        batch = self._batches.pop(coordinator, None)
        if batch is None:
            return
        task = asyncio.get_running_loop().create_task(self._send(coordinator, endpoint, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _connection(self, node_id: int, endpoint: tuple[str, int]) -> AsyncConnection:
        conn = self._connections.get(node_id)
        if conn is None or (conn.host, conn.port) != endpoint:
            if conn is not None:
                conn.close()
            conn = self._connections[node_id] = AsyncConnection(
                endpoint[0], endpoint[1], client_id=f"txn-verify-{self.node_id}",
                login=self.login, ssl_context=self.tls)
        return conn

    async def _send(self, coordinator: int, endpoint: tuple[str, int], batch: _Batch) -> None:
        top = ErrorCode.NONE
        answers: dict[str, Results] = {}
        try:
            response = await self._connection(coordinator, endpoint).request(
                ApiKey.ADD_PARTITIONS_TO_TXN, {"transactions": verify_body(batch.partitions)},
                api_version=VERIFY_VERSION, timeout_ms=VERIFY_TIMEOUT_MS)
            top = ErrorCode(response.get("error_code", 0))
            answers = answers_of(response)  # type: ignore[arg-type]
        except (MiniKafkaError, OSError, ValueError):
            top = ErrorCode.NETWORK_EXCEPTION
        except Exception:  # every waiting produce must get an answer
            log.exception("verify-only AddPartitionsToTxn to broker %d failed", coordinator)
            top, answers = ErrorCode.NETWORK_EXCEPTION, {}
        for (tid, _pid, _epoch), tps, future in batch.waiters:
            if future.done():
                continue
            got = answers.get(tid, {})
            missing = top if top != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
            future.set_result({tp: got.get(tp, missing) for tp in tps})

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self._connections.values():
            conn.close()

