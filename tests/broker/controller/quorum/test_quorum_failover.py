"""A real cluster of 3 controller voters and 3 brokers (``cluster start --controllers 3``,
with its cluster secret: voters log in to each other): the active controller is
SIGKILLed; a new one is elected and serves (a topic created afterwards, a killed broker
fenced), a producer with acks=all keeps getting acknowledgements, and the killed voter
restarts and catches up with the leader's log; then the active controller is SIGSTOPped:
another is elected and serves, and the resumed one follows and catches up.

Processes are started and stopped by :class:`LocalCluster` (by PID, also on failure).
Quorum timeouts are shortened (election 300 ms, fetch 1 s) so the test takes seconds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.async_client import AsyncConnection
from broker.auth import broker_login, controller_login, read_cluster_secret
from broker.cluster.controllers import active_controller, describe_quorum
from broker.controller.quorum.wire import encode_request
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.types import NewTopic
from replication.raft.messages import QuorumVoteRequest
from tests.broker.cluster_harness import LocalCluster
from tests.broker.controller.processes import FEATURES, ControllerClient, incarnation
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

FAST: dict[str, object] = {"replica_lag_time_max_ms": 1500}
QUORUM: dict[str, object] = {"quorum_election_timeout_ms": 300, "quorum_fetch_timeout_ms": 1000}


def quorum_view(cluster: LocalCluster) -> dict[str, Any]:
    try:
        return describe_quorum(cluster.state)
    except Exception as e:  # a voter down or between leaders: look again
        return {"error": str(e), "voters": []}


def produce(bootstrap: str, topic: str, value: bytes) -> int:
    with Producer(bootstrap, acks="all", retries=2_147_483_647, delivery_timeout_ms=30_000,
                  request_timeout_ms=10_000) as producer:
        return producer.send(topic, value, partition=0).result(60).offset


def test_sigkill_of_the_active_controller_elects_another_that_serves(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, FAST, controller_overrides=QUORUM, controllers=3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("before", 1, 3, {"min_insync_replicas": "2"})])
        assert produce(cluster.bootstrap, "before", b"a") == 0

        first = active_controller(cluster.state)
        cluster.kill(first.name)  # SIGKILL

        def new_leader() -> bool:
            return any(v["role"] == "leader" and v["name"] != first.name
                       for v in quorum_view(cluster)["voters"])

        wait_until(new_leader, 20, "a new active controller")
        second = active_controller(cluster.state)
        assert second.name != first.name

        # the new active controller commits and answers: a topic created after the failover
        create_when_brokers_are_back(cluster, NewTopic("after", 1, 3,
                                                       {"min_insync_replicas": "2"}))
        cluster.wait_partition("after", 0, lambda p: p["leader"] is not None
                               and p["leader"] >= 0, "the new topic has a leader")
        assert produce(cluster.bootstrap, "before", b"b") == 1
        assert produce(cluster.bootstrap, "after", b"c") == 0

        # a broker killed now is fenced by the new active controller; acks=all goes on
        cluster.kill("2")
        wait_until(lambda: any(b["node_id"] == 2 and b["fenced"]
                               for b in cluster.report()["brokers"]), 20, "broker 2 fenced")
        assert produce(cluster.bootstrap, "before", b"d") == 2

        # the killed voter restarts as a follower and catches up with the leader's log
        cluster.restart(first.name)
        wait_until(lambda: caught_up(cluster, first.name), 20, f"{first.name} caught up")

        # SIGSTOP of the active controller: the others elect a leader that serves; resumed,
        # the old one steps down (its fetch timeout), drops anything uncommitted, follows
        cluster.pause(second.name)
        wait_until(lambda: any(v["role"] == "leader" and v["name"] != second.name
                               for v in quorum_view(cluster)["voters"]), 20,
                   "a leader while the active controller is paused")
        create_when_brokers_are_back(cluster, NewTopic("while-paused", 1, 2))
        assert produce(cluster.bootstrap, "before", b"e") == 3
        cluster.resume(second.name)
        wait_until(lambda: caught_up(cluster, second.name), 20, f"{second.name} caught up")


def create_when_brokers_are_back(cluster: LocalCluster, topic: NewTopic) -> None:
    """Create ``topic``, retried while the new active controller has too few unfenced
    brokers: it starts every broker's session anew, and brokers still waiting on the
    paused or killed one may be fenced meanwhile (unfenced again once they heartbeat)."""
    def created() -> bool:
        try:
            with Admin(cluster.bootstrap) as admin:
                admin.create_topics([topic])
            return True
        except MiniKafkaError as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return True  # an earlier attempt committed it
            assert "INVALID_REPLICATION_FACTOR" in str(e), e
            return False

    wait_until(created, 30, f"topic {topic.name} created", 0.2)


def caught_up(cluster: LocalCluster, name: str) -> bool:
    """``name`` follows the leader with the leader's log end, at the high watermark."""
    view = quorum_view(cluster)
    ends = {v["name"]: v["log_end_offset"] for v in view["voters"]}
    roles = {v["name"]: v["role"] for v in view["voters"]}
    leader = [n for n, r in roles.items() if r == "leader"]
    return (roles.get(name) == "follower" and len(leader) == 1
            and ends.get(name) == view.get("high_watermark") == ends.get(leader[0]))


async def _send_as(port: int, login: tuple[str, bytes], api_key: int, body: dict[str, Any],
                   version: int) -> dict[str, Any]:
    conn = AsyncConnection("127.0.0.1", port, client_id="test", login=login)
    try:
        return await conn.request(api_key, body, api_version=version, timeout_ms=10_000)
    finally:
        conn.close()


def _vote_error(port: int, login: tuple[str, bytes] | None, candidate: int, epoch: int) -> int:
    """The error of a Vote for ``candidate`` sent on a connection logged in as ``login``:
    the answer's own, else its partition's."""
    assert login is not None
    encoded = encode_request(QuorumVoteRequest(epoch, candidate, 99, 10**6, False), 3001,
                             "minikafka")
    assert encoded is not None
    answer = asyncio.run(_send_as(port, login, encoded[0], encoded[1], 2))
    return int(answer["error_code"]) or int(answer["topics"][0]["partitions"][0]["error_code"])


def test_quorum_requests_need_the_voters_own_login(tmp_path: Path) -> None:
    """An unauthenticated socket's Vote closes it; a broker's login cannot vote, nor a
    voter's login vote for another voter; a voter's login cannot act as a broker; none of
    it moves the quorum's epoch."""
    with LocalCluster(tmp_path, 1, FAST, controller_overrides=QUORUM, controllers=3) as cluster:
        wait_until(lambda: quorum_view(cluster).get("leader_id", -1) >= 3001, 20, "a leader")
        epoch = quorum_view(cluster)["leader_epoch"]
        target = cluster.state.controllers["controller-1"]
        encoded = encode_request(QuorumVoteRequest(epoch + 5, 3002, 99, 10**6, False), 3001,
                                 "minikafka")
        assert encoded is not None
        client = ControllerClient(target.port)
        try:
            assert client.request(encoded[0], encoded[1], version=2) is None  # closed
        finally:
            client.close()
        secret = read_cluster_secret(str(Path(cluster.data_dir) / "cluster.secret"))
        denied = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert _vote_error(target.port, broker_login(secret, 0), 3002, epoch + 5) == denied
        assert _vote_error(target.port, controller_login(secret, 3003), 3002,
                           epoch + 5) == denied
        registration = asyncio.run(_send_as(
            target.port, controller_login(secret, 3002) or ("", b""),
            ApiKey.BROKER_REGISTRATION, {
                "broker_id": 3002, "cluster_id": "minikafka",
                "incarnation_id": incarnation("voter"), "listeners": [
                    {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9,
                     "security_protocol": 0}], "features": FEATURES}, 0))
        assert registration["error_code"] == denied
        view = quorum_view(cluster)
        assert view["leader_epoch"] == epoch and all(
            v["role"] in ("leader", "follower") for v in view["voters"])
