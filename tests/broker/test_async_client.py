"""The broker's asyncio client times requests out on its RequestChannel's clock.

A peer that reads requests and never answers; the deadline is driven by a
``ManualClock`` (no sleeps): nothing fails before ``timeout_ms`` on the clock, the
request fails with RequestTimedOutError at it, the connection is closed and every other
waiter fails with a retriable BrokerUnreachableError.  One test lets the loop's timer
wake up by itself on the real clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from broker.async_client import AsyncConnection, BrokerUnreachableError
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import RequestTimedOutError
from clients.protocol.request_channel import api_versions_request
from timer.clock import Clock, ManualClock


@asynccontextmanager
async def silent_peer(clock: Clock | None = None
                      ) -> AsyncIterator[tuple[AsyncConnection, asyncio.Queue[bytes]]]:
    """A connection to a peer that reads everything and answers nothing."""
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            received.put_nowait(data)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = AsyncConnection("127.0.0.1", port, clock=clock)
    try:
        yield conn, received
    finally:
        await conn.aclose()
        server.close()
        await server.wait_closed()


def api_versions(conn: AsyncConnection, timeout_ms: int) -> asyncio.Task[dict[str, object]]:
    version, body = api_versions_request()
    return asyncio.get_running_loop().create_task(
        conn.request(ApiKey.API_VERSIONS, body, api_version=version, timeout_ms=timeout_ms))


def test_a_request_times_out_at_its_deadline_on_the_injected_clock() -> None:
    async def scenario() -> None:
        clock = ManualClock(1_000)
        async with silent_peer(clock) as (conn, received):
            first = api_versions(conn, timeout_ms=1_000)
            await received.get()  # on the wire
            clock.advance(400)
            second = api_versions(conn, timeout_ms=5_000)
            await received.get()
            clock.advance(599)  # 1 ms before the first deadline
            conn.expire()
            await asyncio.sleep(0)
            assert not first.done() and not second.done()
            clock.advance(1)
            conn.expire()
            with pytest.raises(RequestTimedOutError, match="within 1000 ms"):
                await first
            with pytest.raises(BrokerUnreachableError):  # the connection was closed
                await second

    asyncio.run(scenario())


def test_the_loop_wakes_up_to_expire_a_request() -> None:
    async def scenario() -> None:
        async with silent_peer() as (conn, _received):
            with pytest.raises(RequestTimedOutError, match="within 50 ms"):
                await asyncio.wait_for(api_versions(conn, timeout_ms=50), 10)

    asyncio.run(scenario())
