"""ACL rules (broker.acls): matching, implications, Deny wins, super users and brokers,
the file re-read on change, and its editor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.acls import Authorizer, edit_acls, parse_acls
from clients.protocol.errors import InvalidConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def authorizer(tmp_path: Path, text: str, super_users: str = "",
               clock: Clock | None = None) -> Authorizer:
    path = tmp_path / "acls.txt"
    path.write_text(text)
    return Authorizer(True, str(path), super_users, clock or Clock())


def test_rules_match_names_prefixes_wildcards_and_implied_operations(tmp_path: Path) -> None:
    acl = authorizer(tmp_path, """
        # comment
        User:alice Allow Write Topic orders
        User:alice Allow Read Group billing-*
        User:* Allow Describe Topic public
        User:ops Allow AlterConfigs Topic *
        User:root Allow All Cluster *
    """)
    assert acl.allowed("alice", "Write", "Topic", "orders")
    assert acl.allowed("alice", "Describe", "Topic", "orders")  # Write implies Describe
    assert not acl.allowed("alice", "Read", "Topic", "orders")
    assert not acl.allowed("alice", "Write", "Topic", "orders2")  # a literal name
    assert acl.allowed("alice", "Read", "Group", "billing-eu")  # a prefix
    assert not acl.allowed("alice", "Read", "Group", "billing")
    assert acl.allowed("bob", "Describe", "Topic", "public")  # User:* is everyone
    assert not acl.allowed("bob", "Describe", "Topic", "orders")  # no rule: denied
    assert acl.allowed("ops", "DescribeConfigs", "Topic", "x")  # implied by AlterConfigs
    assert not acl.allowed("ops", "Write", "Topic", "x")
    assert acl.allowed("root", "Create", "Cluster", "kafka-cluster")
    assert not acl.allowed("root", "Create", "Topic", "t")  # another resource type
    assert not acl.allowed(None, "Describe", "Topic", "public")  # nobody logged in


def test_deny_wins_super_users_and_brokers_may_do_anything(tmp_path: Path) -> None:
    acl = authorizer(tmp_path, "User:* Allow All Topic *\nUser:mallory Deny Write Topic *\n",
                     super_users="User:admin; User:ops")
    assert acl.allowed("alice", "Write", "Topic", "t")
    assert not acl.allowed("mallory", "Write", "Topic", "t")
    assert acl.allowed("mallory", "Read", "Topic", "t")
    assert acl.allowed("admin", "Delete", "Group", "g") and acl.allowed("ops", "Alter",
                                                                        "Cluster", "c")
    assert acl.allowed("broker-2", "Read", "Group", "anything")  # the cluster's own
    off = Authorizer(False, str(tmp_path / "acls.txt"))
    assert off.allowed(None, "Write", "Topic", "t")  # disabled: everything allowed


def test_the_file_is_re_read_when_it_changes_and_a_bad_edit_keeps_the_rules(
        tmp_path: Path) -> None:
    clock = Clock()
    acl = authorizer(tmp_path, "User:alice Allow Read Topic t\n", clock=clock)
    path = tmp_path / "acls.txt"
    assert acl.allowed("alice", "Read", "Topic", "t")
    path.write_text("User:alice Allow Read Topic t\nUser:bob Allow Read Topic t\n")
    assert not acl.allowed("bob", "Read", "Topic", "t")  # checked at most once a second
    clock.now += 1.5
    assert acl.allowed("bob", "Read", "Topic", "t")
    path.write_text("User:bob Allow Fly Topic t\n")  # a broken edit
    os.utime(path, ns=(1, 1))
    clock.now += 1.5
    assert acl.allowed("bob", "Read", "Topic", "t")  # the rules last read stay
    path.unlink()
    clock.now += 1.5
    assert not acl.allowed("alice", "Read", "Topic", "t")  # no file: no rules
    path.write_text("User:bob Allow Read Topic\n")
    with pytest.raises(InvalidConfigError, match="line 1"):
        Authorizer(True, str(path))  # at start-up a bad file is a config error


def test_edit_adds_removes_and_refuses_malformed_rules(tmp_path: Path) -> None:
    path = tmp_path / "acls.txt"
    rule = ["User:alice", "Allow", "Write", "Topic", "orders"]
    assert [str(r) for r in edit_acls(path, add=rule)] == ["User:alice Allow Write Topic orders"]
    edit_acls(path, add=rule)  # twice: kept once
    assert len(parse_acls(path.read_text())) == 1
    assert edit_acls(path, remove=rule) == []
    with pytest.raises(InvalidConfigError, match="no such rule"):
        edit_acls(path, remove=rule)
    for bad, needle in ((["alice", "Allow", "Write", "Topic", "t"], "principal"),
                        (["User:a", "Maybe", "Write", "Topic", "t"], "permission"),
                        (["User:a", "Allow", "Write", "Table", "t"], "resource type"),
                        (["User:a", "Allow", "Write", "Topic"], "want")):
        with pytest.raises(InvalidConfigError, match=needle):
            edit_acls(path, add=bad)


def test_some_resource_checks_for_idempotent_producers(tmp_path: Path) -> None:
    """InitProducerId (Kafka's rule): IdempotentWrite on the cluster or Write on any topic."""
    acl = authorizer(tmp_path, """
        User:alice Allow Write Topic orders
        User:carol Allow IdempotentWrite Cluster kafka-cluster
        User:dave Allow All Topic logs-*
        User:erin Allow Write Topic *
        User:erin Deny Write Topic *
    """)
    assert acl.allowed_somewhere("alice", "Write", "Topic")
    assert not acl.allowed_somewhere("bob", "Write", "Topic")  # no rule at all
    assert not acl.allowed_somewhere("carol", "Write", "Topic")
    assert acl.allowed("carol", "IdempotentWrite", "Cluster", "kafka-cluster")
    assert acl.allowed_somewhere("dave", "Write", "Topic")  # All on a prefix
    assert not acl.allowed_somewhere("erin", "Write", "Topic")  # denied everywhere
    assert not acl.allowed_somewhere(None, "Write", "Topic")
    assert acl.allowed_somewhere("broker-0", "Write", "Topic")
