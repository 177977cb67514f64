"""KIP-848 regular expression subscriptions under ACLs on a real broker process (issue
35): alice, allowed Read (so Describe) on ``pub-*`` only, subscribes to ``.*`` with raw
ConsumerGroupHeartbeat v1 requests and is assigned the ``pub-*`` partitions, never the
topic ``secret`` (whose name she may not learn); a super user in the same group with the
same regular expression gets ``secret``; a named subscription to ``secret`` is refused
with TOPIC_AUTHORIZATION_FAILED.  See broker/group/consumer/group.py (Authorization)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.cluster.launcher import main as cluster_main
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import ScramClient
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect
from tests.broker.test_client_auth import add_user

pytestmark = [pytest.mark.multiprocess]
PASSWORD = b"a long enough password"
GROUP = "regex-readers"
TOPICS = {"pub-a": 2, "pub-b": 1, "secret": 3}
RETRIABLE = {int(ErrorCode.COORDINATOR_NOT_AVAILABLE), int(ErrorCode.NOT_COORDINATOR),
             int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}


def login(port: int, username: str) -> socket.socket:
    sock = connect(port, timeout_s=30)
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})[
        "error_code"] == 0
    scram = ScramClient("SCRAM-SHA-256", username, PASSWORD)
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
    assert first["error_code"] == 0, first
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": scram.final(bytes(first["auth_bytes"]))})
    assert final["error_code"] == 0, final
    return sock


def logged_in(port: int, username: str) -> socket.socket:
    """A connection logged in as ``username`` (brokers read the users file within a
    second of a change)."""
    sockets: list[socket.socket] = []

    def done() -> bool:
        try:
            sockets.append(login(port, username))
            return True
        except (AssertionError, OSError):
            return False

    wait_until(done, 30, f"{username} logs in")
    return sockets[-1]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 1, {"client_auth_required": "true",
                                    "authorizer_enabled": "true",
                                    "super_users": "User:admin"}) as c:
        for user in ("alice", "admin"):
            added = add_user(c.data_dir, user, PASSWORD.decode())
            assert added.returncode == 0, added.stderr
        for rule in (["User:alice", "Allow", "Read", "Topic", "pub-*"],
                     ["User:alice", "Allow", "Read", "Group", GROUP]):
            assert cluster_main(["acl", "add", *rule, "--data-dir", c.data_dir]) == 0
        yield c


def heartbeat(sock: socket.socket, member_id: str, epoch: int, *,
              regex: str | None = None, names: list[str] | None = None) -> dict[str, Any]:
    return call(sock, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": GROUP, "member_id": member_id, "member_epoch": epoch,
        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": names, "subscribed_topic_regex": regex,
        "server_assignor": None, "topic_partitions": [] if epoch == 0 else None})


def joined(sock: socket.socket, member_id: str, regex: str) -> dict[str, Any]:
    """The answer to the member's first heartbeat, once the coordinator is ready."""
    answers: list[dict[str, Any]] = []

    def answered() -> bool:  # FindCoordinator creates the offsets topic
        found = call(sock, ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                        "coordinator_keys": [GROUP]})
        if found["coordinators"][0]["error_code"] != 0:
            return False
        answer = heartbeat(sock, member_id, 0, regex=regex)
        assert answer["error_code"] in RETRIABLE | {0}, answer
        answers.append(answer)
        return answer["error_code"] == 0

    wait_until(answered, 30, f"{member_id} joins {GROUP}")
    return answers[-1]


def assigned(answer: dict[str, Any], names: dict[bytes, str]) -> dict[str, list[int]]:
    return {names[bytes(t["topic_id"])]: sorted(t["partitions"])
            for t in answer["assignment"]["topic_partitions"]}


def test_a_regex_member_is_assigned_only_topics_it_may_describe(
        cluster: LocalCluster) -> None:
    port = int(cluster.bootstrap.split(",")[0].rsplit(":", 1)[1])
    admin, alice = logged_in(port, "admin"), logged_in(port, "alice")
    try:
        created = call(admin, ApiKey.CREATE_TOPICS, 4, {"timeout_ms": 30_000, "topics": [
            {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [],
             "configs": []} for n, p in TOPICS.items()]})
        assert [t["error_code"] for t in created["topics"]] == [0, 0, 0], created
        names: dict[bytes, str] = {}

        def known() -> bool:  # the metadata of all three topics has reached the broker
            metadata = call(admin, ApiKey.METADATA, 12, {
                "topics": None, "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
            names.update((bytes(t["topic_id"]), t["name"]) for t in metadata["topics"]
                         if t["error_code"] == 0)
            return set(TOPICS) <= set(names.values())

        wait_until(known, 30, "the topics in the broker's metadata")

        first = joined(alice, "alice-member", ".*")
        assert assigned(first, names) == {"pub-a": [0, 1], "pub-b": [0]}
        # the super user with the same regular expression sees `secret`, alice still not
        other = joined(admin, "admin-member", ".*")
        assert "secret" in assigned(other, names)
        again = heartbeat(alice, "alice-member", first["member_epoch"])
        assert again["error_code"] == 0, again
        described = call(admin, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {
            "group_ids": [GROUP], "include_authorized_operations": False})
        members = {m["member_id"]: m for m in described["groups"][0]["members"]}
        for part in ("assignment", "target_assignment"):
            seen = {t["topic_name"] for t in members["alice-member"][part]["topic_partitions"]}
            assert seen <= {"pub-a", "pub-b"}, (part, seen)
        # a named subscription to a topic alice may not Describe is refused (Kafka's)
        named = heartbeat(alice, "alice-member", again["member_epoch"], names=["secret"])
        assert named["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED, named
    finally:
        admin.close()
        alice.close()
