"""Sending answers to the network processes: encode, copy into a pool buffer, hand over.

:class:`ResponseSender` is the main process's end of the response path (Kafka's
``RequestChannel.sendResponse``): it encodes an answer at the request's version, copies
every byte that is not a file region into a buffer of the shared-memory pool and hands
the buffer to the connection's network process (which writes it and frees it).  When the
answer carries file regions (Fetch), a msgpack list after those bytes says how to
interleave them: ``[n]`` sends the next ``n`` buffer bytes, a region is sent with
``sendfile`` (:mod:`broker.network.regions`).

A response that finds no pool memory is parked (:class:`~broker.requests.
response_parking.ResponseParking`, retried every ``RESPONSE_RETRY_S`` from a loop timer,
given up after ``RESPONSE_ALLOCATE_MS``: its connection is closed); the event loop never
waits for memory.  Error answers never close a healthy connection: an answer that cannot
be encoded (a handler's bug) is replaced by UNKNOWN_SERVER_ERROR in the API's
request-level ``error_code`` (Kafka's ``getErrorResponse``, :func:`send_error`); only an
API version without such a field closes the connection.

Costs: one encode and one copy of the inline bytes per response, one pool lock round
trip; parking is O(1).  Not thread-safe: the main event loop owns it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import msgpack

from broker.handlers.common import RegionRecords
from broker.network.channel.codec import Timing
from broker.network.channel.main_side import MainChannelEndpoint
from broker.network.error_answer import error_answer
from broker.requests.response_parking import ResponseParking
from clients.memory.buffer_pool import BufferPool
from clients.memory.errors import BufferPoolTimeoutError
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import encode_response
from clients.protocol.compiler import records_length
from clients.protocol.errors import MiniKafkaError

log = logging.getLogger(__name__)

RESPONSE_ALLOCATE_MS = 1_000  # a response waits this long for pool memory, parked
RESPONSE_RETRY_S = 0.002  # how often parked responses try again
MAX_PARKED_RESPONSES = 10_000


@dataclass
class _Response:
    """An encoded response on its way to a network process."""

    endpoint: MainChannelEndpoint
    conn_id: int
    parts: list[Any]
    blob: bytes
    inline_bytes: int
    timing: Timing | tuple[()] = ()  # the main process's instants (request metrics)
    ticket: int | None = None  # its place among the connection's answers (AnswerOrder)


def close_connection(endpoint: MainChannelEndpoint, conn_id: int, why: object) -> None:
    """Close a connection whose request cannot be served, saying why in the log."""
    log.warning("closing connection %d.%d: %s", endpoint.index, conn_id, why)
    endpoint.send_close(conn_id)


class ResponseSender:
    """Answers into pool buffers, to the network processes (see the module docstring)."""

    def __init__(self, pool: BufferPool) -> None:
        self.pool = pool
        self._parking: ResponseParking[_Response] = ResponseParking(
            max_parked=MAX_PARKED_RESPONSES, timeout_ms=RESPONSE_ALLOCATE_MS,
            clock_ms=lambda: time.monotonic() * 1000)
        self._retry_timer: asyncio.TimerHandle | None = None

    def send(self, endpoint: MainChannelEndpoint, conn_id: int, api_key: int, version: int,
             correlation_id: int, body: dict[str, Any], *, fallback: bool = True,
             timing: Timing | tuple[()] = (), ticket: int | None = None) -> None:
        """Encode ``body`` and hand it to the network process (parked when the pool has
        no room now).  An answer that cannot be encoded is replaced by the API's error
        answer (``fallback``), or closes the connection.  ``timing`` goes with the
        answer for the request metrics (:mod:`broker.network.channel.codec`); ``ticket``
        its place among the connection's answers
        (:class:`~broker.network.channel.answer_order.AnswerOrder`)."""
        try:
            parts = encode_response(api_key, version, correlation_id, body)
        except MiniKafkaError:
            log.exception("cannot encode a %s v%d response", ApiKey(api_key).name, version)
            if fallback:  # a handler's bug: an error answer, the connection stays healthy
                self.send_error(endpoint, conn_id, api_key, version, correlation_id,
                                timing=timing, ticket=ticket)
            else:
                endpoint.send_close(conn_id)
            return
        inline_bytes = 0
        segments: list[list[Any]] = []
        run = 0
        for part in parts:
            if isinstance(part, RegionRecords):
                if run:
                    segments.append([run])
                    run = 0
                segments.extend(r.wire() for r in part.regions)
            else:
                size = records_length(part)
                run += size
                inline_bytes += size
        blob = b""
        if segments:
            if run:
                segments.append([run])
            blob = msgpack.packb(segments)
        self._parking.offer(_Response(endpoint, conn_id, parts, blob, inline_bytes, timing,
                                      ticket),
                            self._try_deliver, self._give_up)
        if self._parking and self._retry_timer is None:
            self._retry_timer = asyncio.get_running_loop().call_later(
                RESPONSE_RETRY_S, self._retry_parked)

    def send_error(self, endpoint: MainChannelEndpoint, conn_id: int, api_key: int,
                   version: int, correlation_id: int, *,
                   timing: Timing | tuple[()] = (), ticket: int | None = None) -> None:
        """Answer UNKNOWN_SERVER_ERROR (Kafka's answer to a request the broker failed on)
        when the response has a request-level ``error_code`` at this version; otherwise
        there is no way to say it in the API's shape, and the connection is closed."""
        answer = error_answer(api_key, version)
        if answer is None:
            log.warning("closing connection %d.%d: %s v%d has no request-level error code",
                        endpoint.index, conn_id, ApiKey(api_key).name, version)
            endpoint.send_close(conn_id)
            return
        self.send(endpoint, conn_id, api_key, version, correlation_id, answer, fallback=False,
                  timing=timing, ticket=ticket)

    def _try_deliver(self, response: _Response) -> bool:
        """Copy ``response`` into a pool buffer and hand it over; False when the pool has
        no room right now (the caller parks it: the event loop never waits here)."""
        size = response.inline_bytes + len(response.blob)
        try:
            # a buffer of exactly poolable_size comes from the free list (fast path)
            buffer = self.pool.allocate(max(size, self.pool.poolable_size), 0)
        except BufferPoolTimeoutError:
            return False
        except MiniKafkaError as exc:  # larger than the pool, pool closed...
            self._give_up(response, str(exc))
            return True
        memory = buffer.memory
        pos = 0
        for part in response.parts:
            if not isinstance(part, RegionRecords):
                length = records_length(part)
                memory[pos : pos + length] = part
                pos += length
        memory[pos : pos + len(response.blob)] = response.blob
        handle = buffer.handle
        buffer.release()
        response.endpoint.send_response(response.conn_id, handle, response.inline_bytes,
                                        len(response.blob), response.timing,
                                        ticket=response.ticket)
        return True

    def _give_up(self, response: _Response, why: str) -> None:
        close_connection(response.endpoint, response.conn_id, why)

    def _retry_parked(self) -> None:
        self._retry_timer = None
        self._parking.retry(self._try_deliver, self._give_up)
        if self._parking:
            self._retry_timer = asyncio.get_running_loop().call_later(
                RESPONSE_RETRY_S, self._retry_parked)

    def close(self) -> None:
        """Stop retrying parked responses (the loop is ending)."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
