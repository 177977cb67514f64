"""Three real ControllerServers (several ``controller_quorum_voters``) in one event loop
over loopback sockets, no cluster secret, short quorum timeouts: one becomes the active
controller; the others answer the state APIs NOT_CONTROLLER in the API's shape and a
metadata Fetch NOT_LEADER_OR_FOLLOWER at once (no long poll) and DescribeQuorum with the
leader (another partition: UNKNOWN_TOPIC_OR_PARTITION); a CreateTopics on the
active one is answered once committed and every voter's committed image gets the topic;
brokers read up to the high watermark; a stopped active controller hands over and the
next one serves with the same metadata.  (The real-process SIGKILL test:
test_quorum_failover.py.)  Takes about a second.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

from broker.async_client import AsyncConnection
from broker.controller.config import ControllerConfig
from broker.controller.quorum.voter_directory import format_new_quorum
from broker.controller.server import ControllerServer
from broker.metadata.records import decode_record_batches
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from tests.broker.controller.processes import FEATURES, incarnation

IDS = [3001, 3002, 3003]
# short enough for quick elections, long enough that a loaded 2-core machine (the whole
# suite, or other work beside it) does not stall a follower past the fetch timeout: an
# election in the middle of a test answers its requests NOT_CONTROLLER
QUORUM = {"quorum_election_timeout_ms": 300, "quorum_fetch_timeout_ms": 1500}


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _create_topic(name: str) -> dict[str, Any]:
    return {"topics": [{"name": name, "num_partitions": 1, "replication_factor": -1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False}


def _fetch(offset: int, max_wait_ms: int) -> dict[str, Any]:
    return {"replica_id": 0, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"name": "__cluster_metadata", "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


async def _until(condition: Any, what: str, timeout_s: float = 10.0,
                 describe: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, \
            f"timed out waiting for {what}: {describe() if describe else ''}"
        await asyncio.sleep(0.01)


def test_only_the_active_controller_serves_and_answers_once_committed(tmp_path: Path) -> None:
    async def scenario() -> None:
        ports = dict(zip(IDS, _free_ports(3), strict=True))
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
        assert format_new_quorum([tmp_path / str(i) for i in IDS])  # as cluster start does
        servers = {i: ControllerServer(ControllerConfig.load(None, {
            "node_id": i, "controller_quorum_voters": voters, "port": ports[i],
            "data_dir": str(tmp_path / str(i)), **QUORUM})) for i in IDS}
        tasks = {i: asyncio.create_task(s.serve()) for i, s in servers.items()}
        conns = {i: AsyncConnection("127.0.0.1", ports[i], client_id="test") for i in IDS}
        try:
            def active() -> list[int]:
                return [i for i, s in servers.items() if s.quorum and s.quorum.active]

            await _until(lambda: len(active()) == 1, "an active controller")
            leader = active()[0]
            follower = next(i for i in IDS if i != leader)
            refused = await conns[follower].request(ApiKey.CREATE_TOPICS, _create_topic("t"))
            assert [t["error_code"] for t in refused["topics"]] == [ErrorCode.NOT_CONTROLLER]
            described = await conns[follower].request(ApiKey.DESCRIBE_QUORUM, {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]},
                {"topic_name": "other", "partitions": [{"partition_index": 0}]}]})
            ours, other = (t["partitions"][0] for t in described["topics"])
            assert (ours["error_code"], ours["leader_id"]) == (0, leader)
            assert sorted(v["replica_id"] for v in ours["current_voters"]) == IDS
            assert other["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            beat = await conns[follower].request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": 0, "broker_epoch": 1, "current_metadata_offset": 0,
                "want_fence": False, "want_shut_down": False})
            assert beat["error_code"] == ErrorCode.NOT_CONTROLLER

            registered = await conns[leader].request(ApiKey.BROKER_REGISTRATION, {
                "broker_id": 0, "cluster_id": "minikafka", "incarnation_id": incarnation("b0"),
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9,
                               "security_protocol": 0}], "features": FEATURES})
            assert registered["error_code"] == 0
            epoch = registered["broker_epoch"]
            beat = await conns[leader].request(ApiKey.BROKER_HEARTBEAT, {
                "broker_id": 0, "broker_epoch": epoch, "current_metadata_offset": epoch,
                "want_fence": False, "want_shut_down": False})
            assert (beat["error_code"], beat["is_fenced"]) == (0, False)
            created = await conns[leader].request(ApiKey.CREATE_TOPICS, _create_topic("t"))
            assert created["topics"][0]["error_code"] == ErrorCode.NONE
            quorum = servers[leader].quorum
            assert quorum is not None
            hw = quorum.high_watermark
            # answered only once committed: the topic's record is below the HW
            assert servers[leader].apis is not None
            assert servers[leader].apis.state.image.last_applied_offset < hw
            await _until(lambda: all("t" in s.apis.state.image.topics for s in servers.values()
                                     if s.apis is not None), "every voter applied the topic")

            started = time.monotonic()
            answer = await conns[follower].request(ApiKey.FETCH, _fetch(hw, 5000),
                                                   api_version=12)
            part = answer["responses"][0]["partitions"][0]
            assert part["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert time.monotonic() - started < 2.0  # not the 5 s long poll
            read = await conns[leader].request(ApiKey.FETCH, _fetch(0, 0), api_version=12)
            part = read["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and part["high_watermark"] >= hw
            records = decode_record_batches(part["records"])
            assert records and records[-1][0] < part["high_watermark"]
            assert any(getattr(r, "name", None) == "t" for _o, r in records)

            servers[leader].stop()  # graceful: EndQuorumEpoch hands over
            await tasks.pop(leader)
            conns.pop(leader).close()
            def view() -> str:
                return "; ".join(
                    f"{i}: {s.quorum.replica.role.name} epoch {s.quorum.replica.epoch} "
                    f"hw {s.quorum.high_watermark} end {s.quorum.replica.log.end_offset} "
                    f"image {s.quorum.image.last_applied_offset}"
                    for i, s in servers.items() if i != leader and s.quorum)

            await _until(lambda: len(active()) == 1 and active()[0] != leader,
                         "the next active controller", describe=view)
            second = active()[0]
            again = await conns[second].request(ApiKey.CREATE_TOPICS, _create_topic("u"))
            assert again["topics"][0]["error_code"] == ErrorCode.NONE
            image = servers[second].apis.state.image  # type: ignore[union-attr]
            assert {"t", "u"} <= set(image.topics)
        finally:
            for conn in conns.values():
                conn.close()
            for i in tasks:
                servers[i].stop()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(scenario())


def test_a_committed_entry_that_cannot_be_applied_stops_the_voter(tmp_path: Path) -> None:
    """Followers that cannot apply a committed entry (here bytes that are no metadata
    record, proposed on the leader behind its state's back) stop with exit code 1
    instead of serving metadata the quorum does not hold."""
    async def scenario() -> None:
        ports = dict(zip(IDS, _free_ports(3), strict=True))
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
        assert format_new_quorum([tmp_path / str(i) for i in IDS])  # as cluster start does
        servers = {i: ControllerServer(ControllerConfig.load(None, {
            "node_id": i, "controller_quorum_voters": voters, "port": ports[i],
            "data_dir": str(tmp_path / str(i)), **QUORUM})) for i in IDS}
        tasks = {i: asyncio.create_task(s.serve()) for i, s in servers.items()}
        try:
            await _until(lambda: any(s.quorum and s.quorum.active for s in servers.values()),
                         "an active controller")
            leader = next(i for i, s in servers.items() if s.quorum and s.quorum.active)
            quorum = servers[leader].quorum
            assert quorum is not None
            quorum.driver.propose([b"not a metadata record"])
            followers = [tasks[i] for i in IDS if i != leader]
            done, _ = await asyncio.wait(followers, timeout=10)
            assert len(done) == 2 and all(t.result() == 1 for t in done)
        finally:
            for s in servers.values():
                s.stop()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    asyncio.run(scenario())
