"""Forwarding an admin request to the controller as it came, answering with the
controller's answer (Kafka's forwarding of KIP-590, without the envelope: the broker
has checked the client's login and ACLs; the controller trusts its brokers).

:func:`forward` spawns the round trip on the broker's event loop; a controller that
cannot be reached (or answers with an error of the link) is turned into the API's
answer by ``on_error``.  The task is kept referenced until it finishes.

Costs: one round trip to the controller.  Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Body
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError

__all__ = ["forward"]

R = TypeVar("R", bound=Mapping[str, Any])

_pending: set[asyncio.Task[None]] = set()


def forward(core: HandlerCore, api: ApiKey, body: Mapping[str, Any], timeout_ms: int,
            respond: Respond[R], on_error: Callable[[MiniKafkaError], R]) -> None:
    """Send ``body`` to the controller; ``respond`` with its answer, or ``on_error``."""
    controller = core.controller
    assert controller is not None, "forward in controller mode only"

    async def run() -> None:
        try:
            answer = await controller.request(api, cast(Body, body),
                                              timeout_ms=max(timeout_ms, 1000))
        except MiniKafkaError as exc:
            respond(on_error(MiniKafkaError(f"controller: {exc.message}",
                                            exc.code or ErrorCode.UNKNOWN_SERVER_ERROR)))
            return
        respond(cast(R, answer))

    task = asyncio.get_running_loop().create_task(run())
    _pending.add(task)
    task.add_done_callback(_pending.discard)
