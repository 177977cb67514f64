"""The sender-thread side of transactions: find the coordinators, send the manager's requests.

Design (*choice*, as Kafka's client): every transactional request goes through the
producer's sender loop, on the sender's own connections (a coordinator is just another
node to it), never from the user's thread.  So one thread owns every socket, the
ordering rules are kept in one place (AddPartitionsToTxn before a partition's first
batch is drained, EndTxn only after the last batch was acknowledged), and a user call
(``commit_transaction`` ...) only queues its request in the
:class:`~clients.producer.transactions.manager.TransactionManager` and waits on its
result.  Each loop iteration :meth:`TxnRequestSender.maybe_send` takes in what the
idempotence manager decided, fails queued batches when the transaction is aborting or
failed, and sends the next request when none is in flight and no backoff runs.

Requests (ApiKey, version: the connection's highest common one unless noted)::

    FindCoordinator 10   key_type 1 + transactional id (the group id, key_type 0, for
                         TxnOffsetCommit); ``key`` before v4, ``coordinator_keys`` from v4
    InitProducerId  22   {transactional_id, transaction_timeout_ms, producer_id,
                          producer_epoch}  (-1/-1, or the current ones to bump, KIP-360)
    AddPartitionsToTxn 24  v0-3 only (v4+ is broker to broker): v3_and_below_* fields
    AddOffsetsToTxn 25   {transactional_id, producer_id, producer_epoch, group_id}
    TxnOffsetCommit 28   to the group coordinator: the group metadata (generation,
                         member id, instance id from v3) and the offsets
    EndTxn          26   {transactional_id, producer_id, producer_epoch, committed};
                         v5 answers the new (producer_id, producer_epoch) (KIP-890)

Request contexts are ``("txn", request)`` and ``("txn-find", request)`` tuples
(the sender routes tuples starting with ``"txn"`` here).  A lost connection or a
coordinator error forgets the coordinator (found again before the retry); retries wait
``retry_backoff_ms``, except a retriable AddPartitionsToTxn answer (CONCURRENT_TRANSACTIONS:
the previous transaction's markers are still being written), retried after at most
``ADD_PARTITIONS_RETRY_BACKOFF_MS`` (20, Kafka's KAFKA-5477 override): back-to-back
transactions would otherwise wait a whole ``retry_backoff_ms`` (100) each.  The sender
loop sleeps no longer than :meth:`TxnRequestSender.time_to_next_send_ms`.

Costs: O(1) per loop iteration when nothing is due; a request O(partitions named).
Thread safety: none of its own: the sender thread calls it holding the sender lock.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

from clients.network.connection import BrokerConnection
from clients.producer.accumulator import RecordAccumulator
from clients.producer.batch import ProducerBatch
from clients.producer.idempotence import IdempotenceManager
from clients.producer.transactions.manager import (
    GROUP_KEY_TYPE,
    Outcome,
    RequestKind,
    TransactionManager,
    TxnRequest,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import RETRIABLE, ErrorCode, MiniKafkaError, UnsupportedVersionError
from clients.protocol.message_types import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from clients.protocol.request_channel import ClientResponse
from clients.protocol.topics import TopicPartition

ADD_PARTITIONS_RETRY_BACKOFF_MS = 20  # Kafka's TransactionManager override
MAX_CLIENT_ADD_PARTITIONS_VERSION = 3  # v4+ (verify_only batches) is between brokers
Connect = Callable[[int, str, int, float], BrokerConnection | None]


class TxnRequestSender:
    """Sends the transaction manager's requests from the sender loop (see the module)."""

    def __init__(
        self,
        manager: TransactionManager,
        idempotence: IdempotenceManager,
        accumulator: RecordAccumulator,
        *,
        retry_backoff_ms: int,
        least_loaded: Callable[[float], BrokerConnection | None],
        connect: Connect,
        fail: Callable[[ProducerBatch, BaseException], None],
    ) -> None:
        self._txn = manager
        self._idem = idempotence
        self._acc = accumulator
        self._retry_backoff_ms = retry_backoff_ms
        self._least_loaded = least_loaded  # the sender's: connects if need be
        self._connect = connect  # the sender's: a connection to (node, host, port)
        self._fail = fail  # ProduceRequests.fail
        self._coordinators: dict[tuple[int, str], tuple[int, str, int]] = {}
        self._current: TxnRequest | None = None  # taken from the manager, not answered
        self._in_flight = False  # a request (FindCoordinator or _current) awaits its answer
        self._backoff_until = 0.0  # monotonic ms

    def time_to_next_send_ms(self, now: float) -> float:
        """Milliseconds until the running backoff ends (inf when none runs): the sender
        loop sleeps no longer, so a retry goes out when its backoff ends."""
        return self._backoff_until - now if self._backoff_until > now else math.inf

    def maybe_send(self, now: float) -> None:
        txn = self._txn
        txn.poll()
        error = txn.failing_undrained
        if error is not None:
            for batch in self._acc.undrained_batches():
                self._fail(batch, error)
        if self._in_flight or now < self._backoff_until:
            return
        if self._current is None:
            self._current = txn.next_request(self._acc.incomplete)
            if self._current is None:
                return
        request = self._current
        key = self._key(request)
        known = self._coordinators.get(key)
        if known is None:
            self._find_coordinator(request, key, now)
            return
        conn = self._connect(known[0], known[1], known[2], now)
        if conn is None or not conn.can_send:
            if conn is None:
                self._coordinators.pop(key, None)
            self._backoff_until = now + max(self._retry_backoff_ms, 50)
            return
        try:
            api, body, version = self._build(request, conn)
            conn.send(api, body, api_version=version, context=("txn", request))
            self._in_flight = True
        except UnsupportedVersionError as e:
            self._finish(request, self._refuse(request, int(e.code), e.message), key, now)
        except MiniKafkaError:
            self._coordinators.pop(key, None)
            self._backoff_until = now + self._retry_backoff_ms

    def handle_response(self, response: ClientResponse, now: float) -> None:
        kind, request = cast(tuple[str, TxnRequest], response.request.context)
        self._in_flight = False
        key = self._key(request)
        if response.error is not None or response.body is None:
            self._coordinators.pop(key, None)
            if kind == "txn":
                self._txn.request_failed(request)
                self._current = None
            self._backoff_until = now + self._retry_backoff_ms
            return
        body: Any = response.body
        version = response.request.api_version
        if kind == "txn-find":
            self._found(request, key, body, version, now)
            return
        self._finish(request, self._read(request, body), key, now)

    # ------------------------------------------------------------ coordinators
    def _key(self, request: TxnRequest) -> tuple[int, str]:
        key_type, key = request.coordinator
        return (key_type, key if key_type == GROUP_KEY_TYPE else self._txn.transactional_id)

    def _find_coordinator(self, request: TxnRequest, key: tuple[int, str], now: float) -> None:
        conn = self._least_loaded(now)
        if conn is None:
            self._backoff_until = now + max(self._retry_backoff_ms, 50)
            return
        key_type, name = key

        def body(version: int) -> FindCoordinatorRequest:
            if version >= 4:
                return {"key_type": key_type, "coordinator_keys": [name]}
            return {"key": name, "key_type": key_type}

        try:
            conn.send(ApiKey.FIND_COORDINATOR, body, context=("txn-find", request))
            self._in_flight = True
        except MiniKafkaError:
            self._backoff_until = now + self._retry_backoff_ms

    def _found(self, request: TxnRequest, key: tuple[int, str], answer: Any, version: int,
               now: float) -> None:  # fmt: skip
        body = cast(FindCoordinatorResponse, answer)
        if version >= 4:
            found = [c for c in body["coordinators"] if c["key"] == key[1]]
            if not found:
                code, node, host, port = int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1
            else:
                c = found[0]
                code, node, host, port = c["error_code"], c["node_id"], c["host"], c["port"]
        else:
            code, node, host, port = (body["error_code"], body["node_id"], body["host"],
                                      body["port"])  # fmt: skip
        if code == ErrorCode.NONE:
            self._coordinators[key] = (node, host, port)
            return
        if code in RETRIABLE:
            self._backoff_until = now + self._retry_backoff_ms
            return
        self._finish(request, self._refuse(request, code, "FindCoordinator failed"), key, now)

    def _finish(self, request: TxnRequest, outcome: Outcome, key: tuple[int, str],
                now: float) -> None:  # fmt: skip
        self._current = None
        if outcome is Outcome.LOOKUP:
            self._coordinators.pop(key, None)
        if outcome is Outcome.RETRY and request.kind is RequestKind.ADD_PARTITIONS:
            self._backoff_until = now + min(self._retry_backoff_ms,
                                            ADD_PARTITIONS_RETRY_BACKOFF_MS)
        elif outcome is not Outcome.DONE:
            self._backoff_until = now + self._retry_backoff_ms

    # ------------------------------------------------------------ bodies and answers
    def _build(self, request: TxnRequest,
               conn: BrokerConnection) -> tuple[ApiKey, Any, int | None]:  # fmt: skip
        """(API, body, version: None for the highest common one)."""
        txn, idem = self._txn, self._idem
        ids = {"transactional_id": txn.transactional_id, "producer_id": idem.producer_id,
               "producer_epoch": idem.producer_epoch}  # fmt: skip
        kind = request.kind
        if kind is RequestKind.INIT_PRODUCER_ID:
            bump = request.bump and idem.producer_id >= 0
            return ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": txn.transactional_id,
                "transaction_timeout_ms": txn.transaction_timeout_ms,
                "producer_id": idem.producer_id if bump else -1,
                "producer_epoch": idem.producer_epoch if bump else -1,
            }, None
        if kind is RequestKind.ADD_PARTITIONS:
            version = conn.version_for(ApiKey.ADD_PARTITIONS_TO_TXN)
            if version > MAX_CLIENT_ADD_PARTITIONS_VERSION:
                version = MAX_CLIENT_ADD_PARTITIONS_VERSION  # the broker serves 0-3 too
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(request.partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            body: AddPartitionsToTxnRequest = {
                "v3_and_below_transactional_id": txn.transactional_id,
                "v3_and_below_producer_id": idem.producer_id,
                "v3_and_below_producer_epoch": idem.producer_epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps}
                                        for t, ps in by_topic.items()],
            }  # fmt: skip
            return ApiKey.ADD_PARTITIONS_TO_TXN, body, version
        if kind is RequestKind.ADD_OFFSETS:
            assert request.group is not None
            return ApiKey.ADD_OFFSETS_TO_TXN, {**ids, "group_id": request.group.group_id}, None
        if kind is RequestKind.TXN_OFFSET_COMMIT:
            group = request.group
            assert group is not None
            topics: dict[str, TxnOffsetCommitRequestTopic] = {}
            for tp, om in sorted(request.offsets.items()):
                topics.setdefault(tp.topic, {"name": tp.topic, "partitions": []})[
                    "partitions"].append({
                        "partition_index": tp.partition, "committed_offset": om.offset,
                        "committed_leader_epoch": om.leader_epoch,
                        "committed_metadata": om.metadata,
                    })  # fmt: skip
            commit: TxnOffsetCommitRequest = {
                "transactional_id": txn.transactional_id, "group_id": group.group_id,
                "producer_id": idem.producer_id, "producer_epoch": idem.producer_epoch,
                "generation_id": group.generation_id, "member_id": group.member_id,
                "group_instance_id": group.group_instance_id,
                "topics": list(topics.values()),
            }  # fmt: skip
            return ApiKey.TXN_OFFSET_COMMIT, commit, None
        return ApiKey.END_TXN, {**ids, "committed": request.committed}, None

    def _read(self, request: TxnRequest, body: Any) -> Outcome:
        txn, kind = self._txn, request.kind
        if kind is RequestKind.INIT_PRODUCER_ID:
            init = cast(InitProducerIdResponse, body)
            return txn.on_init_producer_id(request, init["error_code"], init["producer_id"],
                                           init["producer_epoch"], init.get("error_message"))
        if kind is RequestKind.ADD_PARTITIONS:
            added = cast(AddPartitionsToTxnResponse, body)
            codes: dict[TopicPartition, int] = {}
            for topic in added.get("results_by_topic_v3_and_below") or []:
                for p in topic["results_by_partition"]:
                    codes[TopicPartition(topic["name"], p["partition_index"])] = (
                        p["partition_error_code"])
            return txn.on_add_partitions(request, codes)
        if kind is RequestKind.ADD_OFFSETS:
            return txn.on_add_offsets(request, cast(AddOffsetsToTxnResponse, body)["error_code"])
        if kind is RequestKind.TXN_OFFSET_COMMIT:
            committed = cast(TxnOffsetCommitResponse, body)
            codes = {TopicPartition(t["name"], p["partition_index"]): p["error_code"]
                     for t in committed["topics"] for p in t["partitions"]}  # fmt: skip
            return txn.on_txn_offset_commit(request, codes)
        end = cast(EndTxnResponse, body)
        return txn.on_end_txn(request, end["error_code"], end.get("producer_id", -1),
                              end.get("producer_epoch", -1))  # fmt: skip

    def _refuse(self, request: TxnRequest, code: int, message: str) -> Outcome:
        """``request`` cannot be sent (no coordinator, version): its answer is ``code``."""
        txn, kind = self._txn, request.kind
        if kind is RequestKind.INIT_PRODUCER_ID:
            return txn.on_init_producer_id(request, code, -1, -1, message)
        if kind is RequestKind.ADD_PARTITIONS:
            return txn.on_add_partitions(request, dict.fromkeys(request.partitions, code))
        if kind is RequestKind.ADD_OFFSETS:
            return txn.on_add_offsets(request, code)
        if kind is RequestKind.TXN_OFFSET_COMMIT:
            return txn.on_txn_offset_commit(request, dict.fromkeys(request.offsets, code))
        return txn.on_end_txn(request, code, -1, -1)
