"""Simple ACLs per principal: who may Read, Write, Create, Delete, Describe or Alter which
topics and groups (Kafka's ``StandardAuthorizer`` model, cut down).

A broker with ``authorizer_enabled`` (it needs ``client_auth_required``: every client
has logged in, so every request has a principal ``User:<name>``) checks each request
against the rules of its ``acl_file`` (the launcher passes ``<data_dir>/acls.txt``;
``minikafka cluster acl add|remove|list`` edits it), one rule per line::

    # minikafka ACLs: principal permission operation resource_type resource_name
    User:alice Allow Write Topic orders
    User:alice Allow Read Group billing-
    User:* Allow Describe Topic *
    User:mallory Deny All Topic *

- ``principal``: ``User:<name>`` or ``User:*`` (everyone who logged in);
- ``permission``: ``Allow`` or ``Deny`` (a matching Deny wins, as in Kafka);
- ``operation``: Read, Write, Create, Delete, Alter, Describe, DescribeConfigs,
  AlterConfigs, IdempotentWrite (Cluster) or All; as in Kafka, Read, Write, Delete and
  Alter imply Describe, and AlterConfigs implies DescribeConfigs;
- ``resource_type``: Topic, Group, Cluster or TransactionalId (Write: use it in
  transactions; Describe: find its coordinator, describe it);
- ``resource_name``: a name, ``*`` (every resource), or a prefix ending in ``*``
  (Kafka's PREFIXED pattern: ``billing-*``).

No rule allowing an operation means it is denied (Kafka's
``allow.everyone.if.no.acl.found=false``), except for ``super_users`` (a ``;``-separated
list of principals, Kafka's syntax) and the cluster's own brokers (``broker-<id>``
logins, :mod:`broker.auth`), which may do everything.  The file is re-read when it
changes (checked at most once a second), so rules apply without a restart; a file that
cannot be read or parsed keeps the rules last read and logs why (at start-up it is a
configuration error).  Kafka's CreateAcls / DeleteAcls (:mod:`broker.handlers.admin.acls`)
edit the same file through :func:`edit_acl_file`, so a rule a client creates reaches
every broker the way ``cluster acl add`` does; every writer holds the file's edit lock
(:func:`broker.watched_file.edit_lock`) while it reads, changes and replaces it.

Where each API checks what (Kafka's mapping; denied items get
TOPIC_AUTHORIZATION_FAILED / GROUP_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED):
docs/security.md.  InitProducerId needs IdempotentWrite on the Cluster or Write on some
topic (Kafka's rule); DescribeCluster and DescribeLogDirs need Describe on the Cluster.

Costs: a check is O(rules of the principal) (rules are indexed by principal); the stat
once a second; an edit reads and rewrites the whole file (at most ``_MAX_FILE_BYTES``).
Thread-safety: one owner (the broker's event loop, or the CLI process).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.watched_file import WatchedFile, edit_lock
from clients.protocol.errors import InvalidConfigError
from clients.protocol.scram import BROKER_PREFIX
from storage.file_io import atomic_write_text

__all__ = ["ACL_FILE", "CLUSTER_RESOURCE", "OPERATIONS", "PERMISSIONS", "RESOURCE_TYPES",
           "AclRule", "Authorizer", "edit_acl_file", "edit_acls", "parse_acls", "read_acls",
           "rule_of"]

ACL_FILE = "acls.txt"
CLUSTER_RESOURCE = "kafka-cluster"  # Kafka's name of the one Cluster resource
OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "All")
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
PERMISSIONS = ("Allow", "Deny")
_IMPLIES_DESCRIBE = {"Read", "Write", "Delete", "Alter"}
_HEADER = "# minikafka ACLs: principal permission operation resource_type resource_name\n"
_MAX_FILE_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class AclRule:
    principal: str  # "User:alice" or "User:*"
    permission: str  # Allow | Deny
    operation: str
    resource_type: str
    resource_name: str  # a name, "*", or "prefix*"

    def __str__(self) -> str:
        return (f"{self.principal} {self.permission} {self.operation} {self.resource_type} "
                f"{self.resource_name}")

    def covers(self, operation: str, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        pattern = self.resource_name
        if pattern != "*" and not (pattern.endswith("*") and name.startswith(pattern[:-1])
                                   ) and pattern != name:
            return False
        op = self.operation
        return (op in ("All", operation)
                or (operation == "Describe" and op in _IMPLIES_DESCRIBE)
                or (operation == "DescribeConfigs" and op == "AlterConfigs"))


def rule_of(fields: Sequence[str]) -> AclRule:
    """The rule of its five fields; ValueError saying what is wrong."""
    if len(fields) != 5 or any(not f or f != "".join(f.split()) for f in fields):
        raise ValueError("want: principal permission operation resource_type resource_name")
    principal, permission, operation, resource_type, name = fields
    if not principal.startswith("User:") or len(principal) == len("User:"):
        raise ValueError(f"principal {principal!r} is not User:<name> or User:*")
    for value, allowed, what in ((permission, PERMISSIONS, "permission"),
                                 (operation, OPERATIONS, "operation"),
                                 (resource_type, RESOURCE_TYPES, "resource type")):
        if value not in allowed:
            raise ValueError(f"{what} {value!r} is not one of {', '.join(allowed)}")
    return AclRule(principal, permission, operation, resource_type, name)


def parse_acls(text: str, where: str = "acls") -> list[AclRule]:
    """The rules of an ACL file's text; InvalidConfigError naming the line."""
    rules = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            rules.append(rule_of(line.split()))
        except ValueError as exc:
            raise InvalidConfigError(f"{where} line {number}: {exc}") from None
    return rules


def read_acls(path: Path) -> list[AclRule]:
    """The rules of the file at ``path`` (none when it does not exist)."""
    if not path.exists():
        return []
    if os.stat(path).st_size > _MAX_FILE_BYTES:
        raise InvalidConfigError(f"{path} is larger than {_MAX_FILE_BYTES} bytes")
    return parse_acls(path.read_text("utf-8"), str(path))


def edit_acl_file(path: Path,
                  edit: Callable[[list[AclRule]], list[AclRule]]) -> list[AclRule]:
    """Under the file's edit lock: read the rules, ``edit`` them (it returns the new
    list) and write the file when they changed; returns the rules now in it.  A result
    too large for the file (``_MAX_FILE_BYTES``) raises InvalidConfigError and writes
    nothing."""
    with edit_lock(path):
        rules = read_acls(path)
        changed = edit(list(rules))
        if changed != rules:
            text = _HEADER + "".join(f"{r}\n" for r in changed)
            if len(text.encode("utf-8")) > _MAX_FILE_BYTES:
                raise InvalidConfigError(f"the ACL file would exceed {_MAX_FILE_BYTES} bytes")
            atomic_write_text(path, text)
        return changed


def edit_acls(path: Path, add: list[str] | None = None,
              remove: list[str] | None = None) -> list[AclRule]:
    """Add and/or remove one rule (given as its five fields) and write the file; returns
    the rules now in it.  A malformed rule, or removing one that is not there, raises
    InvalidConfigError."""
    try:
        added = rule_of(add) if add is not None else None
        removed = rule_of(remove) if remove is not None else None
    except ValueError as exc:
        raise InvalidConfigError(str(exc)) from None

    def edit(rules: list[AclRule]) -> list[AclRule]:
        if added is not None and added not in rules:
            rules.append(added)
        if removed is not None:
            if removed not in rules:
                raise InvalidConfigError(f"no such rule: {removed}")
            rules.remove(removed)
        return rules

    return edit_acl_file(path, edit)


def _by_principal(path: Path) -> dict[str, list[AclRule]]:
    by: dict[str, list[AclRule]] = {}
    for rule in read_acls(path):
        by.setdefault(rule.principal, []).append(rule)
    return by


class Authorizer:
    """The rules of ``path`` plus ``super_users``; :meth:`allowed` answers a check."""

    def __init__(self, enabled: bool, path: str, super_users: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.super_users = {p.strip() for p in super_users.split(";") if p.strip()}
        self._rules: WatchedFile[dict[str, list[AclRule]]] = WatchedFile(
            Path(path) if enabled and path else None, _by_principal, {}, "ACLs", clock)

    def allowed(self, user: str | None, operation: str, resource_type: str,
                name: str) -> bool:
        """May the logged-in ``user`` (None: nobody logged in) do ``operation`` on the
        resource?  Always True when the authorizer is off."""
        mine = self._rules_of(user)
        if mine is None:
            return user is not None or not self.enabled
        verdict = False
        for rule in mine:
            if rule.covers(operation, resource_type, name):
                if rule.permission == "Deny":
                    return False
                verdict = True
        return verdict

    def _rules_of(self, user: str | None) -> list[AclRule] | None:
        """The rules that apply to ``user``; None when no rule is consulted: the
        authorizer is off, nobody logged in, or a broker or super user asks."""
        if not self.enabled or user is None:
            return None
        principal = f"User:{user}"
        if user.startswith(BROKER_PREFIX) or principal in self.super_users:
            return None
        rules = self._rules.value
        return [r for key in (principal, "User:*") for r in rules.get(key, ())]

    def allowed_somewhere(self, user: str | None, operation: str, resource_type: str) -> bool:
        """May ``user`` do ``operation`` on at least one resource of the type (Kafka's
        rule for InitProducerId: IdempotentWrite on the cluster, or Write on any topic)?
        An Allow rule counts unless a Deny rule of the user covers every name."""
        mine = self._rules_of(user)
        if mine is None:
            return user is not None or not self.enabled
        denied_everywhere = any(r.permission == "Deny" and r.resource_name == "*"
                                and r.covers(operation, resource_type, "*") for r in mine)
        return not denied_everywhere and any(
            r.permission == "Allow" and r.resource_type == resource_type
            and r.covers(operation, resource_type, r.resource_name.rstrip("*") or "*")
            for r in mine)
