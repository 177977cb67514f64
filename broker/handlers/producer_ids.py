"""Handler of InitProducerId (idempotent producers here; a transactional id goes to the
transaction coordinator: :mod:`broker.handlers.transactions_coordinator`).

Request ``{transactional_id, transaction_timeout_ms, producer_id, producer_epoch}``,
response ``{error_code, error_message, producer_id, producer_epoch}``:

* ``producer_id == -1`` and ``producer_epoch == -1``: a new producer id, unique in the
  cluster (:mod:`broker.producer_ids`), with epoch 0.
* ``producer_id >= 0`` and ``0 <= producer_epoch < 32767``: the same id with
  ``producer_epoch + 1`` (the epoch bump a client does after UNKNOWN_PRODUCER_ID or an
  OUT_OF_ORDER_SEQUENCE_NUMBER it cannot recover from; partitions then accept sequence 0
  in the new epoch and fence the old one).  At epoch 32767 the bump yields a new id with
  epoch 0.  Choice: like Kafka's non-transactional path the broker keeps no record of
  which client owns an id, so it trusts the pair it is sent.  Versions 0-2 carry no id
  and epoch: always a new id.
* anything else (``-1`` with an epoch, a negative epoch with an id, an id below -1):
  INVALID_REQUEST (42) with the reason, id/epoch -1.
* no id at hand (controller mode, the controller did not give a block within
  :data:`INIT_PRODUCER_ID_TIMEOUT_MS`): COORDINATOR_LOAD_IN_PROGRESS (14, retriable);
  the standalone block file unreadable: KAFKA_STORAGE_ERROR (56).

The answer is immediate unless a block must come from the controller; then it is sent
from a task on the broker's loop.  Costs: O(1).  Not thread-safe: the broker's loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.handlers.transactions_coordinator import handle_transactional_init_producer_id
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import InitProducerIdRequest, InitProducerIdResponse

MAX_PRODUCER_EPOCH = 32767
INIT_PRODUCER_ID_TIMEOUT_MS = 5_000
_pending: set[asyncio.Task[None]] = set()  # answers waiting for a block (one per request)


def _answer(producer_id: int, epoch: int) -> InitProducerIdResponse:
    return {"error_code": 0, "error_message": None, "producer_id": producer_id,
            "producer_epoch": epoch}


def _error(code: ErrorCode, message: str) -> InitProducerIdResponse:
    return {"error_code": int(code), "error_message": message, "producer_id": -1,
            "producer_epoch": -1}


def _invalid(body: InitProducerIdRequest) -> str | None:
    pid, epoch = body["producer_id"], body["producer_epoch"]
    if pid == -1:
        return None if epoch == -1 else f"producer_id -1 needs producer_epoch -1, got {epoch}"
    if pid < -1:
        return f"producer_id must be -1 (new) or >= 0, got {pid}"
    if not 0 <= epoch <= MAX_PRODUCER_EPOCH:
        return f"producer {pid}: producer_epoch must be in [0, {MAX_PRODUCER_EPOCH}], got {epoch}"
    return None


def handle_init_producer_id(core: HandlerCore, body: InitProducerIdRequest,
                            respond: Respond[InitProducerIdResponse],
                            ctx: RequestContext) -> None:
    if body["transactional_id"] is not None:
        handle_transactional_init_producer_id(core, body, respond, ctx)
        return
    reason = _invalid(body)
    if reason is not None:
        respond(_error(ErrorCode.INVALID_REQUEST, reason))
        return
    if not (ctx.allowed("IdempotentWrite", "Cluster", CLUSTER_RESOURCE)
            or ctx.allowed_somewhere("Write", "Topic")):
        respond(_error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized: an "
                       "idempotent producer needs IdempotentWrite on the cluster or Write "
                       "on some topic"))
        return
    pid, epoch = body["producer_id"], body["producer_epoch"]
    if pid >= 0 and epoch < MAX_PRODUCER_EPOCH:
        respond(_answer(pid, epoch + 1))
        return
    allocator: Any = core.producer_ids
    try:
        new_id = allocator.next_id_now()
    except MiniKafkaError as exc:
        respond(_error(exc.code, exc.message))
        return
    if new_id is not None:
        respond(_answer(new_id, 0))
        return

    async def wait_for_block() -> None:
        try:
            respond(_answer(await allocator.next_id(INIT_PRODUCER_ID_TIMEOUT_MS), 0))
        except MiniKafkaError as exc:
            respond(_error(exc.code, exc.message))

    task = asyncio.get_running_loop().create_task(wait_for_block())
    _pending.add(task)
    task.add_done_callback(_pending.discard)


PRODUCER_ID_HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: serves(handle_init_producer_id),
}
