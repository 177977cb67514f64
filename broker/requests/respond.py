"""How a request's answer is given: the ``respond`` callback every API path takes.

``Respond[T]`` is ``Callable[[T | None], None]`` over an API's generated response type
(:mod:`clients.protocol.message_types`): called exactly once, now or later (a parked
produce, fetch or group join answers from its purgatory), with the answer, or with None
for "no response" (acks=0).  It lives here, below both the handlers and the coordinators
that answer for them (:mod:`broker.group`), so that neither imports the other for it.

Costs: type declarations only.  Thread-safety: immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeAlias, TypeVar

ResponseT = TypeVar("ResponseT", bound=Mapping[str, object])
# respond(answer): the answer of the API (None: no response, acks=0)
Respond: TypeAlias = Callable[[ResponseT | None], None]
