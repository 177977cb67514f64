"""A real broker follows a controller leader change (issue 34's broker side).

Two fake voters (3001, 3002) stand in front of one real controller process: the leading
one relays each request to the controller and its answer back; the other answers as a
KRaft voter that is not the leader does: NOT_CONTROLLER (the answer's error, or each
topic's for CreateTopics) and, to the metadata Fetch, NOT_LEADER_OR_FOLLOWER with
``current_leader`` naming the leader.  The broker is started with both as its
``--controller-quorum-voters``; leadership moves from 3001 to 3002 while it runs: the
broker must keep heartbeating, fetching metadata and forwarding admin requests, now
through 3002.  Processes stopped by PID in ``finally``; waits are conditions with
deadlines.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from broker.network.error_answer import error_answer
from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import ErrorCode
from clients.types import NewTopic
from tests.broker.controller.processes import ControllerProcess
from tests.broker.processes import BrokerProcess, wait_until

pytestmark = pytest.mark.multiprocess


class VoterProxy:
    """A voter in front of the real controller (see the module docstring)."""

    def __init__(self, voter_id: int, controller_port: int) -> None:
        self.voter_id = voter_id
        self.controller_port = controller_port
        self.leading = False
        self.leader_hint = (-1, -1)  # (leader id, epoch) a refused Fetch names
        self.seen: list[int] = []  # api keys of the requests relayed to the controller
        self.port = 0

    def refusal(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == ApiKey.FETCH:
            leader_id, epoch = self.leader_hint
            return {"responses": [{"name": t["name"], "partitions": [{
                "partition_index": p["partition"],
                "error_code": ErrorCode.NOT_LEADER_OR_FOLLOWER, "high_watermark": -1,
                "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
                "records": None}
                for p in t["partitions"]]} for t in body["topics"]]}
        if api_key == ApiKey.CREATE_TOPICS:
            return {"topics": [{"name": t["name"], "error_code": ErrorCode.NOT_CONTROLLER}
                               for t in body["topics"]]}
        answer = error_answer(api_key, version, ErrorCode.NOT_CONTROLLER)
        assert answer is not None, f"no error answer for api {api_key}"
        return answer

    async def serve(self, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">i", head)[0])
                request = decode_request(frame)
                if not self.leading:
                    writer.write(encode_response_bytes(
                        request.api_key, request.api_version, request.correlation_id,
                        self.refusal(request.api_key, request.api_version, request.body)))
                    await writer.drain()
                    continue
                self.seen.append(request.api_key)
                if upstream is None:
                    upstream = await asyncio.open_connection("127.0.0.1",
                                                             self.controller_port)
                upstream[1].write(head + frame)
                answer_head = await upstream[0].readexactly(4)
                answer = await upstream[0].readexactly(struct.unpack(">i", answer_head)[0])
                writer.write(answer_head + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()


@contextmanager
def proxies(controller_port: int, ids: list[int]) -> Iterator[list[VoterProxy]]:
    """The voters, served by an event loop on a thread of this test process."""
    loop = asyncio.new_event_loop()
    voters = [VoterProxy(i, controller_port) for i in ids]
    servers: list[asyncio.Server] = []

    async def start() -> None:
        for voter in voters:
            server = await asyncio.start_server(voter.serve, "127.0.0.1", 0)
            voter.port = server.sockets[0].getsockname()[1]
            servers.append(server)

    thread = threading.Thread(target=loop.run_forever, name="voters", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(10)
        yield voters
    finally:
        async def stop() -> None:
            for server in servers:
                server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_a_broker_follows_the_controller_leader_from_one_voter_to_another(
        tmp_path: Path) -> None:
    controller = ControllerProcess(tmp_path / "controller")
    broker: BrokerProcess | None = None
    try:
        controller.start()
        with proxies(controller.port, [3001, 3002]) as (first, second):
            first.leading, first.leader_hint = True, (3001, 1)
            second.leader_hint = (3001, 1)
            voters = f"3001@127.0.0.1:{first.port},3002@127.0.0.1:{second.port}"
            broker = BrokerProcess(tmp_path / "broker-1", node_id=1, extra_args=[
                "--controller-quorum-voters", voters]).start()
            with Admin(broker.bootstrap, request_timeout_ms=10_000) as admin:
                admin.create_topics([NewTopic("before", 1, 1)])
                assert ApiKey.CREATE_TOPICS in first.seen
                # the election: 3002 leads epoch 2, 3001 knows it
                first.leader_hint = second.leader_hint = (3002, 2)
                second.leading, first.leading = True, False

                def relayed_by_second() -> bool:
                    return {ApiKey.BROKER_HEARTBEAT, ApiKey.FETCH} <= set(second.seen)

                wait_until(relayed_by_second, 30, "heartbeats and metadata fetches "
                           "through voter 3002", 0.05)
                admin.create_topics([NewTopic("after", 1, 1)])
                assert ApiKey.CREATE_TOPICS in second.seen

                def after_led_by_1() -> bool:
                    parts = admin.describe_topics(["after"])["after"].partitions
                    return [p.leader for p in parts] == [1]

                wait_until(after_led_by_1, 30, "'after' (created through 3002) led by "
                           "broker 1", 0.1)
                assert [b.node_id for b in admin.describe_cluster().brokers] == [1]
    finally:
        if broker is not None:
            broker.kill()
        controller.kill()
