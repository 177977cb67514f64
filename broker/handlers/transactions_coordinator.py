"""Handlers of the transaction coordinator's APIs: InitProducerId with a transactional
id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions (the coordinator: :mod:`broker.txn.coordinator`; FindCoordinator
key_type 1 is answered in :mod:`broker.handlers.groups`).

Authorization (Kafka's): Write on the TransactionalId for InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
Write on each added topic (TOPIC_AUTHORIZATION_FAILED, the other partitions
OPERATION_NOT_ATTEMPTED), Read on the group of AddOffsetsToTxn
(GROUP_AUTHORIZATION_FAILED); Describe on the TransactionalId for DescribeTransactions
(per id) and ListTransactions (ids not allowed are left out).

- AddPartitionsToTxn v0-3 (clients): a partition that does not exist answers
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED (nothing added);
  else every partition gets the coordinator's answer.  v4+ (batched, between brokers):
  a broker login only (a client gets CLUSTER_AUTHORIZATION_FAILED at the top level);
  ``verify_only`` asks :meth:`~broker.txn.coordinator.TransactionCoordinator.verify`
  (KIP-890 part 1), else the partitions are added.
- AddOffsetsToTxn: adds partition ``partition_for(group_id)`` of ``__consumer_offsets``
  (COORDINATOR_NOT_AVAILABLE while that topic does not exist; the request starts its
  creation, as FindCoordinator for a group does).
- EndTxn v0-4: transaction version 0; v5: transaction version 2 (KIP-890 part 2), the
  answer carries the producer id and the epoch bumped for the next transaction.
- PRODUCER_FENCED goes to clients older than KIP-588 (InitProducerId below v4,
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn below v2) as INVALID_PRODUCER_EPOCH,
  as Kafka answers them (:func:`for_version`).

Costs: O(partitions of the request).  Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.coordination.placement import partition_for
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.handlers.partition_txns import is_broker_login
from broker.requests.respond import Respond
from broker.txn.state import STATE_BY_NAME, TxnError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    AddPartitionsToTxnRequestTransaction,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponseResultsByTransaction,
    AddPartitionsToTxnResponseTopicResult,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTransactionState,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition

FIRST_BATCHED_ADD_PARTITIONS = 4
FIRST_TRANSACTION_V2_END_TXN = 5
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# KIP-588: the first version whose clients understand PRODUCER_FENCED; older ones get
# INVALID_PRODUCER_EPOCH instead, as Kafka answers them
FIRST_PRODUCER_FENCED = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                         ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}


def for_version(api: ApiKey, version: int, code: ErrorCode) -> ErrorCode:
    """``code`` as a client of ``version`` understands it (KIP-588)."""
    if code == ErrorCode.PRODUCER_FENCED and version < FIRST_PRODUCER_FENCED[api]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.allowed("Write", "TransactionalId", transactional_id)


def handle_transactional_init_producer_id(core: HandlerCore, body: InitProducerIdRequest,
                                          respond: Respond[InitProducerIdResponse],
                                          ctx: RequestContext) -> None:
    """InitProducerId with a transactional id (called by
    :func:`broker.handlers.producer_ids.handle_init_producer_id`)."""
    tid = body["transactional_id"] or ""

    def answer(code: ErrorCode, producer_id: int, epoch: int) -> None:
        code = for_version(ApiKey.INIT_PRODUCER_ID, ctx.version, code)
        respond({"throttle_time_ms": 0, "error_code": int(code), "producer_id": producer_id,
                 "producer_epoch": epoch, "error_message": None})

    if not _may_write(ctx, tid):
        answer(TXN_DENIED, -1, -1)
        return
    pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
    if pid < -1 or (pid == -1) != (epoch == -1):
        answer(ErrorCode.INVALID_REQUEST, -1, -1)
        return
    core.transactions.coordinator.init_producer_id(tid, body["transaction_timeout_ms"], pid,
                                                   epoch, answer)


def _topic_results(topics: list[AddPartitionsToTxnRequestTopic],
                   codes: dict[TopicPartition, ErrorCode]
                   ) -> list[AddPartitionsToTxnResponseTopicResult]:
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": int(codes[TopicPartition(t["name"], p)])}
        for p in t["partitions"]]} for t in topics]


def _precheck(core: HandlerCore, ctx: RequestContext, tid: str,
              topics: list[AddPartitionsToTxnRequestTopic]
              ) -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode] | None]:
    """The request's partitions, and their answers when something refuses them all."""
    wanted = [TopicPartition(t["name"], p) for t in topics for p in t["partitions"]]
    if not _may_write(ctx, tid):
        return wanted, dict.fromkeys(wanted, TXN_DENIED)
    bad: dict[TopicPartition, ErrorCode] = {}
    for tp in wanted:
        if not ctx.allowed("Write", "Topic", tp.topic):
            bad[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not _exists(core, tp):
            bad[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if bad:
        return wanted, {tp: bad.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    return wanted, None


def _exists(core: HandlerCore, tp: TopicPartition) -> bool:
    if core.image is not None:
        return core.image.partition(tp.topic, tp.partition) is not None
    info = core.registry.get(tp.topic)
    return info is not None and 0 <= tp.partition < info.num_partitions


def _add_one(core: HandlerCore, ctx: RequestContext, txn: AddPartitionsToTxnRequestTransaction,
             verify_only: bool,
             done: Callable[[dict[TopicPartition, ErrorCode]], None]) -> None:
    tid, pid, epoch = txn["transactional_id"], txn["producer_id"], txn["producer_epoch"]
    wanted, refused = _precheck(core, ctx, tid, txn["topics"])
    if refused is not None:
        done(refused)
        return
    coordinator = core.transactions.coordinator
    if verify_only:
        try:
            done(coordinator.verify(tid, pid, epoch, wanted))
        except TxnError as exc:
            done(dict.fromkeys(wanted, exc.code))
        return
    coordinator.add_partitions(tid, pid, epoch, wanted,
                               lambda code: done(dict.fromkeys(wanted, code)))


def handle_add_partitions_to_txn(core: HandlerCore, body: AddPartitionsToTxnRequest,
                                 respond: Respond[AddPartitionsToTxnResponse],
                                 ctx: RequestContext) -> None:
    if ctx.version < FIRST_BATCHED_ADD_PARTITIONS:
        topics = body["v3_and_below_topics"]
        txn: AddPartitionsToTxnRequestTransaction = {
            "transactional_id": body["v3_and_below_transactional_id"],
            "producer_id": body["v3_and_below_producer_id"],
            "producer_epoch": body["v3_and_below_producer_epoch"], "verify_only": False,
            "topics": topics}
        _add_one(core, ctx, txn, False, lambda codes: respond({
            "throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(
                topics, {tp: for_version(ApiKey.ADD_PARTITIONS_TO_TXN, ctx.version, code)
                         for tp, code in codes.items()})}))
        return
    if not is_broker_login(ctx):
        respond({"throttle_time_ms": 0,
                 "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                 "results_by_transaction": []})
        return
    transactions = body["transactions"]
    results: list[AddPartitionsToTxnResponseResultsByTransaction | None] = [
        None] * len(transactions)
    remaining = [len(transactions)]

    def finish() -> None:
        respond({"throttle_time_ms": 0, "error_code": 0,
                 "results_by_transaction": [r for r in results if r is not None]})

    if not transactions:
        finish()
        return
    for i, one in enumerate(transactions):
        def answered(codes: dict[TopicPartition, ErrorCode], i: int = i,
                     one: AddPartitionsToTxnRequestTransaction = one) -> None:
            results[i] = {"transactional_id": one["transactional_id"],
                          "topic_results": _topic_results(one["topics"], codes)}
            remaining[0] -= 1
            if remaining[0] == 0:
                finish()
        _add_one(core, ctx, one, bool(one["verify_only"]), answered)


def handle_add_offsets_to_txn(core: HandlerCore, body: AddOffsetsToTxnRequest,
                              respond: Respond[AddOffsetsToTxnResponse],
                              ctx: RequestContext) -> None:
    def answer(code: ErrorCode) -> None:
        code = for_version(ApiKey.ADD_OFFSETS_TO_TXN, ctx.version, code)
        respond({"throttle_time_ms": 0, "error_code": int(code)})

    tid, group_id = body["transactional_id"], body["group_id"]
    if not _may_write(ctx, tid):
        answer(TXN_DENIED)
        return
    if not ctx.allowed("Read", "Group", group_id):
        answer(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return
    if core.image is not None:
        info = core.image.topics.get(OFFSETS_TOPIC)
        count = info.num_partitions if info is not None else 0
    else:
        registered = core.registry.get(OFFSETS_TOPIC)
        count = registered.num_partitions if registered is not None else 0
    if count == 0:
        # Kafka adds the partition without the topic; here it must exist (the markers go
        # to it), so it is created as FindCoordinator would: a producer that sends
        # AddOffsetsToTxn before any FindCoordinator for a group (kafka-python does)
        # would otherwise be answered COORDINATOR_NOT_AVAILABLE forever
        core.groups.find_coordinator(group_id)
        answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return
    tp = TopicPartition(OFFSETS_TOPIC, partition_for(group_id, count))
    core.transactions.coordinator.add_partitions(tid, body["producer_id"],
                                                 body["producer_epoch"], [tp], answer)


def handle_end_txn(core: HandlerCore, body: EndTxnRequest, respond: Respond[EndTxnResponse],
                   ctx: RequestContext) -> None:
    def answer(code: ErrorCode, producer_id: int, epoch: int) -> None:
        code = for_version(ApiKey.END_TXN, ctx.version, code)
        respond({"throttle_time_ms": 0, "error_code": int(code), "producer_id": producer_id,
                 "producer_epoch": epoch})

    tid = body["transactional_id"]
    if not _may_write(ctx, tid):
        answer(TXN_DENIED, -1, -1)
        return
    version = 2 if ctx.version >= FIRST_TRANSACTION_V2_END_TXN else 0
    core.transactions.coordinator.end_txn(tid, body["producer_id"], body["producer_epoch"],
                                          bool(body["committed"]), version, answer)


def handle_describe_transactions(core: HandlerCore, body: DescribeTransactionsRequest,
                                 respond: Respond[DescribeTransactionsResponse],
                                 ctx: RequestContext) -> None:
    states: list[DescribeTransactionsResponseTransactionState] = []
    for tid in body["transactional_ids"]:
        if not ctx.allowed("Describe", "TransactionalId", tid):
            states.append({"error_code": int(TXN_DENIED), "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout_ms": 0,
                           "transaction_start_time_ms": -1, "producer_id": -1,
                           "producer_epoch": -1, "topics": []})
        else:
            states.append(core.transactions.coordinator.describe(tid))
    respond({"throttle_time_ms": 0, "transaction_states": states})


def handle_list_transactions(core: HandlerCore, body: ListTransactionsRequest,
                             respond: Respond[ListTransactionsResponse],
                             ctx: RequestContext) -> None:
    filters = body["state_filters"]
    code, found = core.transactions.coordinator.list_transactions(
        filters, body["producer_id_filters"], body.get("duration_filter", -1))
    respond({"throttle_time_ms": 0, "error_code": int(code),
             "unknown_state_filters": [s for s in filters if s not in STATE_BY_NAME],
             "transaction_states": [t for t in found if ctx.allowed(
                 "Describe", "TransactionalId", t["transactional_id"])]})


TRANSACTION_COORDINATOR_HANDLERS: dict[int, Handler] = {
    ApiKey.ADD_PARTITIONS_TO_TXN: serves(handle_add_partitions_to_txn),
    ApiKey.ADD_OFFSETS_TO_TXN: serves(handle_add_offsets_to_txn),
    ApiKey.END_TXN: serves(handle_end_txn),
    ApiKey.DESCRIBE_TRANSACTIONS: serves(handle_describe_transactions),
    ApiKey.LIST_TRANSACTIONS: serves(handle_list_transactions),
}
