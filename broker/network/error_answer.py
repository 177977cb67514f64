"""The generic error answer of an API: what a server sends instead of closing a healthy
connection when it failed on a request (a bug in a handler, an answer it cannot encode).

Kafka answers such a request with ``getErrorResponse``: the API's response carrying the
error code.  Generically that is possible when the response has a request-level
``error_code`` at that version (every other field takes its declared default, which the
codec fills in); :func:`error_answer` returns that body, or None when the version has
no such field (Produce, Metadata, ListOffsets, Fetch before v7, ...: errors are per
topic or partition there, and the caller closes the connection as before).

Used by the broker's main process (:mod:`broker.server`) and the controller
(:mod:`broker.controller.server`).  Costs: O(fields of the response), no allocation but
the answer.  Pure; thread-safe.
"""

from __future__ import annotations

from typing import Any

from clients.protocol.errors import ErrorCode
from clients.protocol.registry import APIS


def error_answer(api_key: int, version: int,
                 code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> dict[str, Any] | None:
    """``{"error_code": code}`` if ``api_key``'s response at ``version`` has a request-level
    ``error_code``, else None."""
    api = APIS.get(api_key)
    if api is None or not any(f.name == "error_code" for f in api.response.fields_at(version)):
        return None
    return {"error_code": int(code)}
