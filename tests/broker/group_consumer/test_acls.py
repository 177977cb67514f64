"""ACLs of the KIP-848 APIs (broker/handlers/groups.py): ConsumerGroupHeartbeat needs
Read on the group and Describe on each topic named, ConsumerGroupDescribe Describe on
the group, as Kafka; refused before the coordinator is reached.  An accepted heartbeat
hands the coordinator the principal's Describe check (its regular expression resolves
only to the topics that allows)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.acls import Authorizer, edit_acls
from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode

UNREACHED: Any = SimpleNamespace(groups=SimpleNamespace(coordinator=None))


def _ctx(tmp_path: Path, *acls: list[str]) -> RequestContext:
    path = tmp_path / "acls.txt"
    edit_acls(path, add=["User:admin", "Allow", "Describe", "Cluster", "kafka-cluster"])
    for acl in acls:
        edit_acls(path, add=acl)
    return RequestContext(1, "c", principal="alice", authorizer=Authorizer(True, str(path)))


def _heartbeat(ctx: RequestContext) -> dict[str, Any]:
    answers: list[Any] = []
    HANDLERS[ApiKey.CONSUMER_GROUP_HEARTBEAT](UNREACHED, {
        "group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []},
        answers.append, ctx)
    (answer,) = answers
    return dict(answer)


def test_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(
        tmp_path: Path) -> None:
    assert _heartbeat(_ctx(tmp_path))["error_code"] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    only_group = _ctx(tmp_path, ["User:alice", "Allow", "Read", "Group", "g"])
    assert _heartbeat(only_group)["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_describe_needs_describe_on_the_group(tmp_path: Path) -> None:
    answers: list[Any] = []
    HANDLERS[ApiKey.CONSUMER_GROUP_DESCRIBE](
        UNREACHED, {"group_ids": ["g"], "include_authorized_operations": False},
        answers.append, _ctx(tmp_path))
    assert [g["error_code"] for g in answers[0]["groups"]] == \
        [ErrorCode.GROUP_AUTHORIZATION_FAILED]


def test_heartbeat_hands_the_coordinator_the_principals_describe_check(
        tmp_path: Path) -> None:
    seen: list[Any] = []
    core: Any = SimpleNamespace(groups=SimpleNamespace(coordinator=SimpleNamespace(
        consumer_group_heartbeat=lambda *args, **kwargs: seen.append(kwargs["may_describe"]))))
    ctx = _ctx(tmp_path, ["User:alice", "Allow", "Read", "Group", "g"],
               ["User:alice", "Allow", "Read", "Topic", "pub-*"])
    HANDLERS[ApiKey.CONSUMER_GROUP_HEARTBEAT](core, {
        "group_id": "g", "member_id": "m", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 1000, "subscribed_topic_names": None,
        "subscribed_topic_regex": ".*", "server_assignor": None, "topic_partitions": []},
        lambda answer: None, ctx)
    (may_describe,) = seen
    assert may_describe("pub-a") and not may_describe("secret")
