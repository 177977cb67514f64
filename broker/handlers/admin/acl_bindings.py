"""Kafka's ACL bindings and binding filters, mapped to and from the rules of the ACL file
(:class:`broker.acls.AclRule`).

A Kafka binding is (resource type, resource name, pattern type, principal, host,
operation, permission), each enumeration by Kafka's number
(:mod:`clients.protocol.messages.security`).  A rule maps to exactly one binding: a
resource name ``*`` is Kafka's LITERAL ``*`` (every resource), ``prefix*`` is PREFIXED
``prefix``, anything else LITERAL; the host is always ``*``.  A binding maps to a rule
when the rule file can say it, else :func:`rule_of_binding` raises INVALID_REQUEST with
the reason: a host other than ``*`` (rules are not per host), an operation or resource
type we do not enforce (ClusterAction, CreateTokens, DescribeTokens; DelegationToken,
User), a LITERAL name ending in ``*`` other than ``*`` itself or an empty PREFIXED
prefix (the file could not tell them apart), a name, principal or host with white space.

:class:`BindingFilter` is Kafka's AclBindingFilter: None (or ANY) matches everything in
that field; the pattern type filter MATCH matches the LITERAL binding of the name, the
LITERAL ``*`` and every PREFIXED binding whose prefix starts the name, ANY matches either
pattern type with exactly that name.  A filter with an UNKNOWN (0) or out-of-range value
raises INVALID_REQUEST.

Costs: O(1) per binding, O(rules) per filter.  Thread-safety: pure functions and
immutable values.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.acls import AclRule, rule_of
from clients.protocol.errors import ErrorCode, MiniKafkaError

__all__ = ["ANY", "LITERAL", "PREFIXED", "Binding", "BindingFilter", "binding_of_rule",
           "rule_of_binding"]

ANY = 1
MATCH = 2
LITERAL = 3
PREFIXED = 4
WILDCARD_HOST = "*"

# Kafka's numbers -> the names of the rule file (None: not enforced here)
RESOURCE_TYPES: dict[int, str | None] = {
    2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId", 6: None, 7: None}
OPERATIONS: dict[int, str | None] = {
    2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter", 8: "Describe",
    9: None, 10: "DescribeConfigs", 11: "AlterConfigs", 12: "IdempotentWrite", 13: None,
    14: None}
PERMISSIONS: dict[int, str | None] = {2: "Deny", 3: "Allow"}
_KAFKA_NAMES: dict[str, tuple[dict[int, str | None], dict[int, str]]] = {
    "resource type": (RESOURCE_TYPES, {6: "DelegationToken", 7: "User"}),
                "operation": (OPERATIONS, {9: "ClusterAction", 13: "CreateTokens",
                                           14: "DescribeTokens"}),
                "permission": (PERMISSIONS, {})}


def _number_of(table: dict[int, str | None], name: str) -> int:
    return next(k for k, v in table.items() if v == name)


def _invalid(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, ErrorCode.INVALID_REQUEST)


@dataclass(frozen=True, slots=True)
class Binding:
    """One Kafka ACL binding (numbers as on the wire)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


def binding_of_rule(rule: AclRule) -> Binding:
    name, pattern = rule.resource_name, LITERAL
    if name != "*" and name.endswith("*"):
        name, pattern = name[:-1], PREFIXED
    return Binding(_number_of(RESOURCE_TYPES, rule.resource_type), name, pattern,
                   rule.principal, WILDCARD_HOST, _number_of(OPERATIONS, rule.operation),
                   _number_of(PERMISSIONS, rule.permission))


def _name_in_file(what: str, number: int) -> str:
    table, unsupported = _KAFKA_NAMES[what]
    name = table.get(number)
    if name is None:
        if number in unsupported:
            raise _invalid(f"{what} {unsupported[number]} is not supported by this "
                           "broker's ACLs")
        raise _invalid(f"{what} {number} is not a valid {what} of an ACL binding")
    return name


def rule_of_binding(b: Binding) -> AclRule:
    """The rule of the ACL file that says ``b``; INVALID_REQUEST when none can."""
    if b.host != WILDCARD_HOST:
        raise _invalid(f"host {b.host!r}: this broker's ACLs are not per host; use '*'")
    if b.pattern_type == LITERAL:
        if b.resource_name != "*" and b.resource_name.endswith("*"):
            raise _invalid(f"literal resource name {b.resource_name!r} may not end with '*'")
        name = b.resource_name
    elif b.pattern_type == PREFIXED:
        if not b.resource_name or b.resource_name.endswith("*"):
            raise _invalid(f"prefixed resource name {b.resource_name!r} must be non-empty "
                           "and not end with '*'")
        name = b.resource_name + "*"
    else:
        raise _invalid(f"pattern type {b.pattern_type}: a binding is LITERAL (3) or "
                       "PREFIXED (4)")
    fields = (b.principal, _name_in_file("permission", b.permission_type),
              _name_in_file("operation", b.operation),
              _name_in_file("resource type", b.resource_type), name)
    try:
        return rule_of(fields)
    except ValueError as exc:
        raise _invalid(str(exc)) from None


@dataclass(frozen=True, slots=True)
class BindingFilter:
    """Kafka's AclBindingFilter: None names match any value, ANY (1) numbers too."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    def check(self) -> None:
        """INVALID_REQUEST when a field is UNKNOWN (0) or out of range."""
        for what, value, top in (("resource type", self.resource_type, 7),
                                 ("pattern type", self.pattern_type, 4),
                                 ("operation", self.operation, 14),
                                 ("permission", self.permission_type, 3)):
            if not ANY <= value <= top:
                raise _invalid(f"{what} {value} is not a valid filter value")

    def matches(self, b: Binding) -> bool:
        return (self.resource_type in (ANY, b.resource_type)
                and self._pattern_matches(b)
                and self.principal in (None, b.principal)
                and self.host in (None, b.host)
                and self.operation in (ANY, b.operation)
                and self.permission_type in (ANY, b.permission_type))

    def _pattern_matches(self, b: Binding) -> bool:
        name = self.resource_name
        if self.pattern_type == MATCH:
            if name is None:
                return True
            if b.pattern_type == LITERAL:
                return b.resource_name in (name, "*")
            return name.startswith(b.resource_name)
        if self.pattern_type not in (ANY, b.pattern_type):
            return False
        return name is None or name == b.resource_name
