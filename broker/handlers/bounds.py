"""Answers to requests over a per-request bound (checked before decoding, see
:mod:`broker.network.request_bounds`).

Kafka has no such bounds, and these APIs have no request-level error code in every
version, so the answer is the closest a client understands, never a closed connection:

- Metadata naming more than ``max_metadata_topics`` topics: the cluster part (brokers,
  cluster id, controller) and **no topic** (a capped answer; Metadata has only per-topic
  error codes, and naming each topic back would cost what the bound avoids).  A client
  treats the topics as not yet known and asks again, or gives up at its own timeout.
- Fetch naming more than ``max_fetch_partitions`` partitions: v7+ the request-level
  ``error_code`` INVALID_REQUEST (42) and no partition; v4-6 (no such field) no partition.
- Produce naming more than ``max_produce_partitions`` partition entries: no answer here
  (:func:`answer_over_bound` is False; the server closes the connection): Produce has no
  request-level error code, and naming every partition back would cost what the bound
  avoids.  No client of ours or Kafka's sends one (a topic has at most 10,000).

Costs: O(1) plus the Metadata cluster part.  Run on the broker's event loop thread.
"""

from __future__ import annotations

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import RequestContext
from broker.handlers.topics import handle_metadata
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode


def answer_over_bound(core: HandlerCore, api_key: int, api_version: int,
                      respond: Respond) -> bool:
    """Answer a request that is over its bound; False if ``api_key`` has no bound here."""
    if api_key == ApiKey.METADATA:
        handle_metadata(core, {"topics": [], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False}, respond,
                        RequestContext(api_version))
        return True
    if api_key == ApiKey.FETCH:
        respond({"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                 "session_id": 0, "responses": []})
        return True
    return False
