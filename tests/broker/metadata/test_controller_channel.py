"""The broker's controller channel follows the active controller of a quorum
(broker.metadata.controller_channel): fake voters on loopback answer BrokerHeartbeat
as the controller or NOT_CONTROLLER, and the metadata Fetch NOT_LEADER_OR_FOLLOWER
with a ``current_leader`` hint; the channel must land on the leader, follow a leader
change, skip a killed voter and follow the hint straight to the named voter.
No sleeps: each scenario awaits the requests it makes (the finder's backoff is real
time, 50 ms at most here)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.async_client import BrokerUnreachableError
from broker.config import BrokerConfig
from broker.metadata.controller_channel import ControllerQuorumChannel, redirect_of
from broker.metadata.controller_finder import ActiveControllerFinder
from broker.metadata.follower import heartbeat_attempt_timeout_ms
from broker.metadata.quorum_voters import parse_quorum_voters
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import ErrorCode

Answer = Callable[[int, dict[str, Any]], dict[str, Any]]


def heartbeat_answer(error_code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error_code, "is_caught_up": True,
            "is_fenced": False, "should_shut_down": False, "report_replica_logs": False}


def fetch_answer(error_code: int, leader_id: int = -1, leader_epoch: int = -1
                 ) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
        "name": "__cluster_metadata", "partitions": [{
            "partition_index": 0, "error_code": error_code, "high_watermark": 5,
            "last_stable_offset": 5, "log_start_offset": 0, "diverging_epoch": None,
            "current_leader": {"leader_id": leader_id, "leader_epoch": leader_epoch},
            "snapshot_id": None, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": b""}]}]}


class FakeVoter:
    """A voter that is the controller (``leading``) or answers "not me"; records who
    asked what (``hits``)."""

    def __init__(self, voter_id: int, hits: list[tuple[int, int]]) -> None:
        self.voter_id = voter_id
        self.hits = hits
        self.leading = False
        self.hint: tuple[int, int] = (-1, -1)  # current_leader of a refused Fetch
        self.described: tuple[int, int] = (-1, -1)  # leader, epoch its DescribeQuorum says
        self.silent = False  # reads requests, never answers (a SIGSTOPped process)
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()

    def answer(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        self.hits.append((self.voter_id, api_key))
        if api_key == ApiKey.DESCRIBE_QUORUM:
            leader_id, epoch = self.described
            return {"error_code": 0, "topics": [{"topic_name": "__cluster_metadata",
                                                 "partitions": [{
                "partition_index": 0, "error_code": 0, "leader_id": leader_id,
                "leader_epoch": epoch, "high_watermark": 3, "current_voters": [],
                "observers": []}]}]}
        if api_key == ApiKey.FETCH:
            return fetch_answer(0) if self.leading else fetch_answer(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, *self.hint)
        return heartbeat_answer(0 if self.leading else ErrorCode.NOT_CONTROLLER)

    async def start(self) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.add(writer)
            try:
                while True:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    request = decode_request(await reader.readexactly(size))
                    if self.silent:
                        continue
                    writer.write(encode_response_bytes(
                        request.api_key, request.api_version, request.correlation_id,
                        self.answer(request.api_key, request.body)))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                self._writers.discard(writer)
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def kill(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self._writers):  # a killed process drops its connections
            writer.close()
        await self.server.wait_closed()


@asynccontextmanager
async def quorum(n: int, attempt_timeout_ms: int = 5_000) -> AsyncIterator[
        tuple[list[FakeVoter], ControllerQuorumChannel, list[tuple[int, int]]]]:
    hits: list[tuple[int, int]] = []
    voters = [FakeVoter(i + 1, hits) for i in range(n)]
    for voter in voters:
        await voter.start()
    text = ",".join(f"{v.voter_id}@127.0.0.1:{v.port}" for v in voters)
    if n == 1:
        text = f"127.0.0.1:{voters[0].port}"  # the one-voter form
    channel = ControllerQuorumChannel(
        ActiveControllerFinder(parse_quorum_voters(text), _real_clock()), client_id="t",
        attempt_timeout_ms=attempt_timeout_ms)
    try:
        yield voters, channel, hits
    finally:
        await channel.aclose()
        for voter in voters:
            if voter.server is not None and voter.server.is_serving():
                await voter.kill()


def _real_clock() -> Any:
    from timer.clock import MonotonicClock
    return MonotonicClock()


def heartbeat(channel: ControllerQuorumChannel) -> Any:
    return channel.request(ApiKey.BROKER_HEARTBEAT, {
        "broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 4,
        "want_fence": False, "want_shut_down": False}, timeout_ms=5_000)


def metadata_fetch(channel: ControllerQuorumChannel) -> Any:
    return channel.request(ApiKey.FETCH, {
        "replica_id": 1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [{
            "name": "__cluster_metadata", "partitions": [{
                "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
        timeout_ms=5_000)


def test_the_channel_finds_the_leader_and_follows_a_leader_change() -> None:
    async def scenario() -> None:
        async with quorum(3) as (voters, channel, hits):
            voters[1].leading = True
            assert (await heartbeat(channel))["error_code"] == 0
            assert hits == [(1, ApiKey.BROKER_HEARTBEAT), (1, ApiKey.DESCRIBE_QUORUM),
                            (2, ApiKey.BROKER_HEARTBEAT)]  # 1 knows no leader: next
            hits.clear()
            assert (await heartbeat(channel))["error_code"] == 0
            assert hits == [(2, ApiKey.BROKER_HEARTBEAT)], "stays with the leader"
            hits.clear()
            voters[1].leading, voters[2].leading = False, True  # voter 3 won an election
            assert (await heartbeat(channel))["error_code"] == 0
            assert [v for v, api in hits if api == ApiKey.BROKER_HEARTBEAT] == [2, 3]
            assert channel.finder.leader_id == 3
            assert channel.address == f"127.0.0.1:{voters[2].port}"

    asyncio.run(scenario())


def test_a_refusal_without_hint_asks_describe_quorum_for_the_leader() -> None:
    async def scenario() -> None:
        async with quorum(3) as (voters, channel, hits):
            voters[2].leading = True
            voters[0].described = (3, 2)
            assert (await heartbeat(channel))["error_code"] == 0
            assert hits == [(1, ApiKey.BROKER_HEARTBEAT), (1, ApiKey.DESCRIBE_QUORUM),
                            (3, ApiKey.BROKER_HEARTBEAT)], "voter 2 skipped: 1 named 3"
            assert (channel.finder.leader_id, channel.finder.leader_epoch) == (3, 2)

    asyncio.run(scenario())


def test_a_killed_leader_is_skipped_for_the_next_voter() -> None:
    async def scenario() -> None:
        async with quorum(3) as (voters, channel, hits):
            voters[0].leading = True
            assert (await heartbeat(channel))["error_code"] == 0
            await voters[0].kill()
            voters[1].leading = True
            hits.clear()
            assert (await heartbeat(channel))["error_code"] == 0
            assert hits == [(2, ApiKey.BROKER_HEARTBEAT)]
            assert channel.finder.leader_id == 2

    asyncio.run(scenario())


def test_a_metadata_fetch_follows_the_current_leader_hint() -> None:
    async def scenario() -> None:
        async with quorum(3) as (voters, channel, hits):
            voters[0].leading = True
            fetches = channel.fork("t-metadata")  # own connections, the same finder
            try:
                assert (await metadata_fetch(fetches))["responses"][0]["partitions"][0][
                    "error_code"] == 0
                voters[0].leading, voters[2].leading = False, True
                voters[0].hint = (3, 7)
                hits.clear()
                await metadata_fetch(fetches)
                assert [v for v, _ in hits] == [1, 3], "straight to the hinted voter 3"
                assert (channel.finder.leader_id, channel.finder.leader_epoch) == (3, 7)
                hits.clear()
                assert (await heartbeat(channel))["error_code"] == 0
                assert hits == [(3, ApiKey.BROKER_HEARTBEAT)], "the fork shares the finder"
            finally:
                await fetches.aclose()

    asyncio.run(scenario())


def test_a_paused_leader_costs_one_attempt_then_the_next_voter_answers() -> None:
    async def scenario() -> None:
        async with quorum(3, attempt_timeout_ms=200) as (voters, channel, hits):
            voters[0].leading = True
            assert (await heartbeat(channel))["error_code"] == 0
            voters[0].silent = True  # SIGSTOP: the connection stays, nothing answers
            voters[1].leading = True
            hits.clear()
            started = asyncio.get_running_loop().time()
            assert (await heartbeat(channel))["error_code"] == 0  # budget 5 s
            assert asyncio.get_running_loop().time() - started < 2.0
            assert hits == [(2, ApiKey.BROKER_HEARTBEAT)]
            assert channel.finder.leader_id == 2

    asyncio.run(scenario())


def test_a_request_may_give_each_voter_a_smaller_share_than_the_channel() -> None:
    """The broker's heartbeat: a paused leader costs the request's share (200 ms), not
    the channel's (5 s), so the heartbeat reaches the new leader within the session."""
    async def scenario() -> None:
        async with quorum(3) as (voters, channel, hits):  # the channel's share: 5 s
            voters[0].leading = True
            assert (await heartbeat(channel))["error_code"] == 0
            voters[0].silent = True
            voters[1].leading = True
            hits.clear()
            started = asyncio.get_running_loop().time()
            answer = await channel.request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 4,
                "want_fence": False, "want_shut_down": False}, timeout_ms=3_000,
                attempt_timeout_ms=200)
            assert answer["error_code"] == 0
            assert asyncio.get_running_loop().time() - started < 1.5
            assert hits == [(2, ApiKey.BROKER_HEARTBEAT)]

    asyncio.run(scenario())


def test_heartbeat_share_is_a_third_of_the_session() -> None:
    config = BrokerConfig.load(None, {"broker_session_timeout_ms": 3000,
                                      "broker_heartbeat_interval_ms": 500})
    assert heartbeat_attempt_timeout_ms(config) == 1000
    slow = BrokerConfig.load(None, {"broker_session_timeout_ms": 1200,
                                    "broker_heartbeat_interval_ms": 500})
    assert heartbeat_attempt_timeout_ms(slow) == 500


def test_no_leader_anywhere_returns_the_refusal_within_the_budget() -> None:
    async def scenario() -> None:
        async with quorum(3) as (_voters, channel, hits):
            answer = await channel.request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 4,
                "want_fence": False, "want_shut_down": False}, timeout_ms=300)
            assert answer["error_code"] == ErrorCode.NOT_CONTROLLER
            heartbeats = [v for v, api in hits if api == ApiKey.BROKER_HEARTBEAT]
            assert set(heartbeats) == {1, 2, 3}
            assert len(heartbeats) <= 3 * 4, "rounds are bounded by the backoff"

    asyncio.run(scenario())


def test_one_voter_is_one_attempt_as_a_plain_connection() -> None:
    async def scenario() -> None:
        async with quorum(1) as (voters, channel, hits):
            assert (await heartbeat(channel))["error_code"] == ErrorCode.NOT_CONTROLLER
            assert len(hits) == 1
            voters[0].leading = True
            await asyncio.sleep(0.06)  # past the finder's 50 ms backoff (real clock)
            assert (await heartbeat(channel))["error_code"] == 0
            await voters[0].kill()
            with pytest.raises(BrokerUnreachableError):
                await heartbeat(channel)

    asyncio.run(scenario())


@pytest.mark.parametrize(("api_key", "answer", "hint"), [
    (ApiKey.BROKER_HEARTBEAT, heartbeat_answer(0), None),
    (ApiKey.BROKER_HEARTBEAT, heartbeat_answer(ErrorCode.NOT_CONTROLLER), (None, -1)),
    (ApiKey.CREATE_TOPICS, {"topics": [{"name": "a", "error_code": 41},
                                       {"name": "b", "error_code": 41}]}, (None, -1)),
    (ApiKey.CREATE_TOPICS, {"topics": [{"name": "a", "error_code": 41},
                                       {"name": "b", "error_code": 36}]}, None),
    (ApiKey.FETCH, fetch_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER, 2, 9), (2, 9)),
    (ApiKey.FETCH, fetch_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER), (None, -1)),
    (ApiKey.FETCH, fetch_answer(0), None),
])
def test_what_counts_as_not_the_controller(api_key: int, answer: dict[str, Any],
                                           hint: tuple[int | None, int] | None) -> None:
    assert redirect_of(api_key, answer) == hint
