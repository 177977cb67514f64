"""The answer a controller voter gives to a request only the active controller may serve:
the API's own response with NOT_CONTROLLER (or REQUEST_TIMED_OUT: a change the quorum did
not commit in time) as its error, where brokers look for it
(:mod:`broker.metadata.controller_channel` resends an answer whose own error, or every
entry's, is NOT_CONTROLLER to the next voter).

Where the response has a request-level ``error_code`` (registration, heartbeat,
AlterPartition, AllocateProducerIds, ElectLeaders, the reassignment APIs) that field
carries it (:func:`broker.network.error_answer.error_answer`); the topic and config APIs
have none, so every entry the request named gets it (its other fields take their
declared defaults, which the codec fills in).

Costs: O(entries of the request).  Pure; thread-safe.
"""

from __future__ import annotations

from typing import Any

from broker.network.error_answer import error_answer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode

__all__ = ["not_controller_answer"]


def not_controller_answer(api_key: int, version: int, body: dict[str, Any],
                          code: ErrorCode, message: str) -> dict[str, Any]:
    """``api_key``'s answer to ``body`` carrying ``code`` (see the module docstring)."""
    answer = error_answer(api_key, version, code)
    if answer is not None:
        return answer
    error = {"error_code": int(code), "error_message": message}
    if api_key == ApiKey.CREATE_TOPICS:
        return {"throttle_time_ms": 0,
                "topics": [{"name": t["name"], **error} for t in body["topics"]]}
    if api_key == ApiKey.DELETE_TOPICS:
        names = ([{"name": t["name"], "topic_id": t["topic_id"]} for t in body["topics"]]
                 if version >= 6 else [{"name": n} for n in body["topic_names"]])
        return {"throttle_time_ms": 0, "responses": [{**n, **error} for n in names]}
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {"throttle_time_ms": 0,
                "results": [{"name": t["name"], **error} for t in body["topics"]]}
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return {"throttle_time_ms": 0, "responses": [
            {"resource_type": r["resource_type"], "resource_name": r["resource_name"], **error}
            for r in body["resources"]]}
    raise ValueError(f"no NOT_CONTROLLER answer for API {api_key}")
