"""QuorumDriver: three voters, each a KRaftReplica on its FileRaftLog and QuorumStateFile,
driven over real loopback sockets with Kafka's quorum requests (Vote v2,
BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v12).  A leader is elected, a proposal is
committed on every voter, a stopped leader hands over and the survivors commit again;
DescribeQuorum reports the leader's view; a leader whose traffic is dropped (what SIGSTOP
does) steps down and rejoins as a follower; a request whose sender is not the logged-in
voter changes nothing.  Timeouts are shortened (RaftConfig) so the test takes ~1-2 s.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker.controller.quorum.driver import QuorumDriver
from broker.controller.quorum.file_raft_log import RAFT_LOG_CONFIG, FileRaftLog
from broker.controller.quorum.wire import encode_request
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response_bytes
from clients.protocol.errors import ErrorCode
from replication.raft.config import RaftConfig
from replication.raft.messages import QuorumVoteRequest
from replication.raft.replica import KRaftReplica
from replication.raft.state_file import QuorumStateFile
from storage.log.log import Log
from timer.clock import MonotonicClock

CONFIG = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=500, election_backoff_max_ms=100,
                    request_timeout_ms=200, fetch_interval_ms=20)
IDS = [1, 2, 3]


class Voters:
    def __init__(self, root: Path, require_login: bool = False) -> None:
        self.root = root
        self.require_login = require_login
        self.drivers: dict[int, QuorumDriver] = {}
        self.logs: dict[int, Log] = {}
        self.servers: dict[int, asyncio.Server] = {}
        self.changed = asyncio.Event()
        self.cut_off: set[int] = set()  # voters whose traffic is dropped both ways

    async def start(self) -> None:
        for i in IDS:
            self.servers[i] = await asyncio.start_server(self._serve(i), "127.0.0.1", 0)
        peers = {i: ("127.0.0.1", s.sockets[0].getsockname()[1]) for i, s in self.servers.items()}
        clock = MonotonicClock()
        for i in IDS:
            self.logs[i] = Log.open(self.root / str(i) / "__cluster_metadata-0", RAFT_LOG_CONFIG)
            replica = KRaftReplica(i, IDS, FileRaftLog(self.logs[i]),
                                   QuorumStateFile(self.root / str(i)), clock,
                                   random.Random(i), CONFIG)
            self.drivers[i] = QuorumDriver(replica, peers, clock=clock,
                                           require_login=self.require_login,
                                           on_change=self.changed.set)
            self.drivers[i].start()

    def _serve(self, i: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    request = decode_request(await reader.readexactly(size))
                    driver = self.drivers.get(i)
                    if (driver is None or i not in self.servers or i in self.cut_off
                            or request.client_id in {f"controller-{c}" for c in self.cut_off}):
                        return  # the connection closes: the sender's request fails
                    body = (driver.describe() if request.api_key == ApiKey.DESCRIBE_QUORUM else
                            driver.handle_request(request.api_key, request.api_version,
                                                  request.body, None))
                    writer.write(encode_response_bytes(request.api_key, request.api_version,
                                                       request.correlation_id, body))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()
        return serve

    async def until(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        async with asyncio.timeout(timeout_s):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    def leader(self) -> int | None:
        leaders = [i for i, d in self.drivers.items() if d.is_leader]
        return leaders[0] if leaders else None

    async def stop(self, i: int) -> None:
        driver = self.drivers.pop(i)
        await driver.stop()
        self.servers.pop(i).close()
        self.logs.pop(i).close()

    async def stop_all(self) -> None:
        for i in list(self.drivers):
            await self.stop(i)


def test_three_voters_elect_commit_and_hand_over(tmp_path: Path) -> None:
    async def scenario() -> None:
        voters = Voters(tmp_path)
        await voters.start()
        try:
            await voters.until(lambda: voters.leader() is not None)
            first = voters.leader()
            assert first is not None
            last = voters.drivers[first].propose([b"topic-a"])
            assert last is not None
            assert await voters.drivers[first].wait_committed(last, 2000)
            await voters.until(lambda: all(d.replica.high_watermark > last
                                           for d in voters.drivers.values()))
            described = voters.drivers[first].describe()["topics"][0]["partitions"][0]
            assert described["leader_id"] == first
            assert described["high_watermark"] > last
            assert sum(v["log_end_offset"] > last for v in described["current_voters"]) >= 2
            await voters.stop(first)  # graceful: EndQuorumEpoch hands over at once
            await voters.until(lambda: voters.leader() not in (None, first), 3.0)
            second = voters.leader()
            assert second is not None
            again = voters.drivers[second].propose([b"topic-b"])
            assert again is not None and again > last
            assert await voters.drivers[second].wait_committed(again, 2000)
            for d in voters.drivers.values():
                payloads = [e.payload for e in d.replica.log.entries_from(0, 100)]
                assert b"topic-a" in payloads
        finally:
            await voters.stop_all()

    asyncio.run(scenario())


def test_a_request_not_from_the_logged_in_voter_changes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        voters = Voters(tmp_path, require_login=True)
        await voters.start()
        try:
            driver = voters.drivers[1]
            epoch = driver.replica.epoch
            encoded = encode_request(QuorumVoteRequest(epoch + 5, 2, 100, 100, False), 1, None)
            assert encoded is not None
            api_key, body = encoded
            for login in (None, 3):
                answer = driver.handle_request(api_key, 2, body, login)
                partition = answer["topics"][0]["partitions"][0]
                assert partition["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                assert driver.replica.epoch == epoch and driver.replica.voted_for is None
            answer = driver.handle_request(api_key, 2, body, 2)  # logged in as voter 2
            assert answer["topics"][0]["partitions"][0]["vote_granted"]
            assert driver.replica.epoch == epoch + 5 and driver.replica.voted_for == 2
        finally:
            await voters.stop_all()

    asyncio.run(scenario())


def test_a_leader_cut_off_steps_down_and_rejoins_as_follower(tmp_path: Path) -> None:
    """What SIGSTOP does to a leader, in one process: its traffic is dropped both ways.
    The others elect a new leader after the fetch timeout and commit; the old leader
    resigns by check quorum; healed, it follows the new leader (PreVote: it does not
    depose it) and catches up."""
    async def scenario() -> None:
        voters = Voters(tmp_path)
        await voters.start()
        try:
            await voters.until(lambda: voters.leader() is not None)
            old = voters.leader()
            assert old is not None
            old_epoch = voters.drivers[old].replica.epoch
            voters.cut_off.add(old)
            await voters.until(lambda: any(
                d.is_leader and d.replica.epoch > old_epoch for d in voters.drivers.values()), 5.0)
            new = next(i for i, d in voters.drivers.items()
                       if d.is_leader and d.replica.epoch > old_epoch)
            await voters.until(lambda: not voters.drivers[old].is_leader, 5.0)
            offset = voters.drivers[new].propose([b"while-cut-off"])
            assert offset is not None
            assert await voters.drivers[new].wait_committed(offset, 2000)
            assert voters.drivers[old].replica.high_watermark <= offset
            voters.cut_off.clear()
            await voters.until(lambda: voters.drivers[old].replica.high_watermark > offset, 5.0)
            assert voters.drivers[new].is_leader
            assert voters.drivers[old].replica.leader_id == new
        finally:
            await voters.stop_all()

    asyncio.run(scenario())
