"""DescribeTransactions and ListTransactions answers from transaction metadata, pure
(Kafka's TransactionCoordinator.handleDescribeTransactions / handleListTransactions;
:class:`broker.txn.coordinator.TransactionCoordinator` hands them its cache).

Contract: :func:`described` answers one id: the coordinator's error for it
(INVALID_REQUEST, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), else
TRANSACTIONAL_ID_NOT_FOUND without metadata, else its state, timeout, start time,
producer and partitions by topic; :func:`listed` filters ids by state name (an unknown
name matches nothing), producer id and (v1) open longer than ``duration_ms``, in id
order, with COORDINATOR_LOAD_IN_PROGRESS while a partition loads.

Costs: :func:`described` O(partitions of the transaction); :func:`listed` O(n log n) for
n ids.  Pure: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from broker.txn.state import STATE_BY_NAME, TransactionState, TxnMetadata
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    DescribeTransactionsResponseTransactionState,
    ListTransactionsResponseTransactionState,
)


def described(transactional_id: str, code: ErrorCode | None, meta: TxnMetadata | None
              ) -> DescribeTransactionsResponseTransactionState:
    """One DescribeTransactions entry; ``code`` is the coordinator's error for the id."""
    if code is None and meta is None:
        code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    if code is not None or meta is None:
        return {"error_code": int(code or 0), "transactional_id": transactional_id,
                "transaction_state": "", "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1, "producer_id": -1,
                "producer_epoch": -1, "topics": []}
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {"error_code": 0, "transactional_id": transactional_id,
            "transaction_state": meta.state.display_name,
            "transaction_timeout_ms": meta.transaction_timeout_ms,
            "transaction_start_time_ms": meta.txn_start_timestamp_ms,
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()]}


def listed(metas: Iterable[TxnMetadata], states: Sequence[str], producer_ids: Sequence[int],
           duration_ms: int, now_ms: int, loading: bool
           ) -> tuple[ErrorCode, list[ListTransactionsResponseTransactionState]]:
    """ListTransactions over ``metas`` (see the module docstring)."""
    wanted = {STATE_BY_NAME.get(s) for s in states}
    found: list[ListTransactionsResponseTransactionState] = []
    for meta in sorted(metas, key=lambda m: m.transactional_id):
        if states and meta.state not in wanted:
            continue
        if producer_ids and meta.producer_id not in producer_ids:
            continue
        if duration_ms >= 0 and (meta.state is not TransactionState.ONGOING
                                 or now_ms - meta.txn_start_timestamp_ms < duration_ms):
            continue
        found.append({"transactional_id": meta.transactional_id,
                      "producer_id": meta.producer_id,
                      "transaction_state": meta.state.display_name})
    return (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE), found
