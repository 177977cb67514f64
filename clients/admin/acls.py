"""ACL operations of :class:`~clients.admin.Admin`: DescribeAcls, CreateAcls, DeleteAcls,
with Kafka's value types :class:`AclBinding` and :class:`AclBindingFilter`.

Enumerations are given by Kafka's names (upper case, as Kafka's Java enums and
confluent-kafka spell them): resource type TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
(ANY in a filter); pattern type LITERAL, PREFIXED (ANY, MATCH in a filter); operation
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS,
IDEMPOTENT_WRITE (ANY in a filter); permission ALLOW, DENY (ANY in a filter).  A name
that is not one of them raises ValueError before anything is sent.

Contract: each call is one request to any broker (every broker serves the ACL APIs
over the same rules).  ``describe_acls`` returns the matching bindings or raises the
request's error; ``create_acls`` returns ``{binding: None or error}``; ``delete_acls``
returns ``{filter: [deleted bindings] or error}``; per-item errors follow
:func:`~clients.admin.requests.raise_first`.

Costs: one round trip per call.  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for
from clients.protocol.message_types import (
    CreateAclsRequest,
    CreateAclsRequestCreation,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

__all__ = ["AclAdmin", "AclBinding", "AclBindingFilter"]

RESOURCE_TYPES = {"ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
PATTERN_TYPES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
OPERATIONS = {"ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6,
              "ALTER": 7, "DESCRIBE": 8, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11,
              "IDEMPOTENT_WRITE": 12}
PERMISSIONS = {"ANY": 1, "DENY": 2, "ALLOW": 3}
_FILTER_ONLY = ("ANY", "MATCH")


def _number(table: dict[str, int], what: str, name: str, in_filter: bool) -> int:
    if name not in table or (not in_filter and name in _FILTER_ONLY):
        allowed = [n for n in table if in_filter or n not in _FILTER_ONLY]
        raise ValueError(f"{what} {name!r} is not one of {', '.join(allowed)}")
    return table[name]


def _name(table: dict[str, int], number: int) -> str:
    return next((n for n, v in table.items() if v == number), str(number))


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (``principal``, ``User:<name>`` or ``User:*``, from ``host``) may or
    may not (``permission_type``) do ``operation`` on the resources of the pattern."""

    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str

    def wire(self) -> tuple[int, str, int, str, str, int, int]:
        return (_number(RESOURCE_TYPES, "resource type", self.resource_type, False),
                self.resource_name,
                _number(PATTERN_TYPES, "pattern type", self.pattern_type, False),
                self.principal, self.host,
                _number(OPERATIONS, "operation", self.operation, False),
                _number(PERMISSIONS, "permission", self.permission_type, False))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings to describe or delete: None (or ANY) in a field matches any value;
    pattern type MATCH matches every binding that applies to ``resource_name``."""

    resource_type: str = "ANY"
    resource_name: str | None = None
    pattern_type: str = "ANY"
    principal: str | None = None
    host: str | None = None
    operation: str = "ANY"
    permission_type: str = "ANY"

    def wire(self) -> DescribeAclsRequest:
        return {
            "resource_type_filter": _number(RESOURCE_TYPES, "resource type",
                                            self.resource_type, True),
            "resource_name_filter": self.resource_name,
            "pattern_type_filter": _number(PATTERN_TYPES, "pattern type", self.pattern_type,
                                           True),
            "principal_filter": self.principal, "host_filter": self.host,
            "operation": _number(OPERATIONS, "operation", self.operation, True),
            "permission_type": _number(PERMISSIONS, "permission", self.permission_type, True)}


def _binding(resource_type: int, resource_name: str, pattern_type: int, principal: str,
             host: str, operation: int, permission_type: int) -> AclBinding:
    return AclBinding(_name(RESOURCE_TYPES, resource_type), resource_name,
                      _name(PATTERN_TYPES, pattern_type), principal, host,
                      _name(OPERATIONS, operation), _name(PERMISSIONS, permission_type))


class AclAdmin:
    """DescribeAcls, CreateAcls and DeleteAcls."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests

    def describe_acls(self, acl_filter: AclBindingFilter, *,
                      timeout_ms: int | None = None) -> list[AclBinding]:
        timeout = self._requests.timeout(timeout_ms)
        body = self._requests.request(None, ApiKey.DESCRIBE_ACLS, acl_filter.wire(), timeout,
                                      DescribeAclsResponse)
        if body["error_code"]:
            raise error_for(body["error_code"], body["error_message"] or "describe ACLs")
        return [_binding(r["resource_type"], r["resource_name"], r["pattern_type"],
                         a["principal"], a["host"], a["operation"], a["permission_type"])
                for r in body["resources"] for a in r["acls"]]

    def create_acls(self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None,
                    raise_on_error: bool = True) -> dict[AclBinding, MiniKafkaError | None]:
        wanted = list(dict.fromkeys(bindings))
        timeout = self._requests.timeout(timeout_ms)
        creations: list[CreateAclsRequestCreation] = []
        for b in wanted:
            rtype, name, pattern, principal, host, operation, permission = b.wire()
            creations.append({"resource_type": rtype, "resource_name": name,
                              "resource_pattern_type": pattern, "principal": principal,
                              "host": host, "operation": operation,
                              "permission_type": permission})
        request: CreateAclsRequest = {"creations": creations}
        body = self._requests.request(None, ApiKey.CREATE_ACLS, request, timeout,
                                      CreateAclsResponse)
        out: dict[AclBinding, MiniKafkaError | None] = {}
        for b, r in zip(wanted, body["results"], strict=True):
            out[b] = (error_for(r["error_code"], r["error_message"] or f"create {b}")
                      if r["error_code"] else None)
        return raise_first(out, raise_on_error)

    def delete_acls(self, filters: Iterable[AclBindingFilter], *,
                    timeout_ms: int | None = None, raise_on_error: bool = True
                    ) -> dict[AclBindingFilter, list[AclBinding] | MiniKafkaError]:
        wanted = list(dict.fromkeys(filters))
        timeout = self._requests.timeout(timeout_ms)
        request: DeleteAclsRequest = {"filters": [f.wire() for f in wanted]}
        body = self._requests.request(None, ApiKey.DELETE_ACLS, request, timeout,
                                      DeleteAclsResponse)
        out: dict[AclBindingFilter, list[AclBinding] | MiniKafkaError] = {}
        for f, r in zip(wanted, body["filter_results"], strict=True):
            out[f] = (error_for(r["error_code"], r["error_message"] or f"delete {f}")
                      if r["error_code"] else
                      [_binding(m["resource_type"], m["resource_name"], m["pattern_type"],
                                m["principal"], m["host"], m["operation"],
                                m["permission_type"]) for m in r["matching_acls"]])
        return raise_first(out, raise_on_error)
