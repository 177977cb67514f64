"""Handlers of DescribeAcls, CreateAcls and DeleteAcls: Kafka's ACL admin APIs over the
rules of the ACL file (:mod:`broker.acls`) that ``minikafka cluster acl`` edits.

Contract (Kafka's, with our rule model, :mod:`broker.handlers.admin.acl_bindings`):

- A broker without ``authorizer_enabled`` (or without an ``acl_file``) answers
  SECURITY_DISABLED: there are no ACLs to show or change.
- DescribeAcls needs Describe on the Cluster, CreateAcls and DeleteAcls Alter on it
  (CLUSTER_AUTHORIZATION_FAILED: for the whole request, each creation, each filter).
- DescribeAcls answers the bindings its filter matches, grouped by resource pattern; the
  file is read afresh, so a rule created a moment ago on any broker is shown.
- CreateAcls adds each valid creation (a binding the rule file cannot say gets
  INVALID_REQUEST with the reason, the others are still created); a binding already
  there is success (Kafka's rule).  DeleteAcls removes every binding each filter
  matches and lists them; a filter matching nothing is success with no bindings.
- Both edit the file under its edit lock (:func:`broker.acls.edit_acl_file`): every
  broker reads the same file (``cluster start`` gives them one), so a change applies on
  every broker within the file recheck interval (a second), as ``cluster acl`` changes
  do.  A change that would make the file too large: POLICY_VIOLATION, nothing written.

Difference from Kafka: Kafka keeps ACLs in its metadata log; the rules here have no host
(only ``*``) and support the operations and resource types of :mod:`broker.acls`.

Costs: one read of the file per request, plus one atomic rewrite when something changed;
O(rules x filters) matching.  Blocking file I/O on the event loop (a small file, an admin
API).  Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

from pathlib import Path

from broker.acls import CLUSTER_RESOURCE, AclRule, edit_acl_file, read_acls
from broker.handlers.admin.acl_bindings import (
    Binding,
    BindingFilter,
    binding_of_rule,
    rule_of_binding,
)
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, as_minikafka_error, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.message_types import (
    CreateAclsRequest,
    CreateAclsResponse,
    CreateAclsResponseResult,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DeleteAclsResponse,
    DeleteAclsResponseFilterResult,
    DeleteAclsResponseMatchingAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseResource,
)


def _acl_file(core: HandlerCore) -> Path:
    """The ACL file, or SECURITY_DISABLED when this broker enforces no ACLs."""
    if not core.config.authorizer_enabled or not core.config.acl_file:
        raise MiniKafkaError("no authorizer is configured on this broker "
                             "(authorizer_enabled=false)", ErrorCode.SECURITY_DISABLED)
    return Path(core.config.acl_file)


def _require_cluster(ctx: RequestContext, operation: str) -> None:
    if not ctx.allowed(operation, "Cluster", CLUSTER_RESOURCE):
        raise MiniKafkaError(f"not authorized to {operation} the cluster (needed to "
                             f"{'list' if operation == 'Describe' else 'change'} ACLs)",
                             ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _filter_of(f: DescribeAclsRequest | DeleteAclsRequestFilter) -> BindingFilter:
    out = BindingFilter(f["resource_type_filter"], f["resource_name_filter"],
                        f["pattern_type_filter"], f["principal_filter"], f["host_filter"],
                        f["operation"], f["permission_type"])
    out.check()
    return out


def _file_error(exc: Exception) -> MiniKafkaError:
    """An edit's failure as Kafka's code: a file too large is POLICY_VIOLATION."""
    if isinstance(exc, InvalidConfigError):
        return MiniKafkaError(exc.message, ErrorCode.POLICY_VIOLATION)
    if isinstance(exc, OSError):
        return MiniKafkaError(f"cannot write the ACL file: {exc}",
                              ErrorCode.UNKNOWN_SERVER_ERROR)
    return as_minikafka_error(exc)


def handle_describe_acls(core: HandlerCore, body: DescribeAclsRequest,
                         respond: Respond[DescribeAclsResponse], ctx: RequestContext) -> None:
    try:
        path = _acl_file(core)
        _require_cluster(ctx, "Describe")
        wanted = _filter_of(body)
        bindings = [b for b in map(binding_of_rule, read_acls(path)) if wanted.matches(b)]
    except Exception as exc:
        error = _file_error(exc)
        respond({"throttle_time_ms": 0, "error_code": int(error.code),
                 "error_message": error.message or None, "resources": []})
        return
    resources: dict[tuple[int, str, int], DescribeAclsResponseResource] = {}
    for b in bindings:
        key = (b.resource_type, b.resource_name, b.pattern_type)
        resource = resources.setdefault(key, {
            "resource_type": b.resource_type, "resource_name": b.resource_name,
            "pattern_type": b.pattern_type, "acls": []})
        resource["acls"].append({"principal": b.principal, "host": b.host,
                                 "operation": b.operation,
                                 "permission_type": b.permission_type})
    respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None,
             "resources": list(resources.values())})


def handle_create_acls(core: HandlerCore, body: CreateAclsRequest,
                       respond: Respond[CreateAclsResponse], ctx: RequestContext) -> None:
    results: list[CreateAclsResponseResult] = []
    wanted: list[AclRule] = []
    for c in body["creations"]:
        try:
            _acl_file(core)
            _require_cluster(ctx, "Alter")
            wanted.append(rule_of_binding(Binding(
                c["resource_type"], c["resource_name"], c["resource_pattern_type"],
                c["principal"], c["host"], c["operation"], c["permission_type"])))
            results.append({"error_code": 0, "error_message": None})
        except MiniKafkaError as exc:
            results.append({"error_code": int(exc.code), "error_message": exc.message})
    if wanted:
        def add(rules: list[AclRule]) -> list[AclRule]:
            return rules + [r for i, r in enumerate(wanted)
                            if r not in rules and r not in wanted[:i]]
        try:
            edit_acl_file(_acl_file(core), add)
        except Exception as exc:
            error = _file_error(exc)
            results = [r if r["error_code"] else {"error_code": int(error.code),
                                                  "error_message": error.message}
                       for r in results]
    respond({"throttle_time_ms": 0, "results": results})


def handle_delete_acls(core: HandlerCore, body: DeleteAclsRequest,
                       respond: Respond[DeleteAclsResponse], ctx: RequestContext) -> None:
    filters: list[BindingFilter | MiniKafkaError] = []
    for f in body["filters"]:
        try:
            _acl_file(core)
            _require_cluster(ctx, "Alter")
            filters.append(_filter_of(f))
        except MiniKafkaError as exc:
            filters.append(exc)
    removed: list[list[Binding]] = [[] for _ in filters]

    def remove(rules: list[AclRule]) -> list[AclRule]:
        kept = []
        for rule in rules:
            binding = binding_of_rule(rule)
            hits = [i for i, f in enumerate(filters)
                    if isinstance(f, BindingFilter) and f.matches(binding)]
            for i in hits:
                removed[i].append(binding)
            if not hits:
                kept.append(rule)
        return kept

    failed: MiniKafkaError | None = None
    if any(isinstance(f, BindingFilter) for f in filters):
        try:
            edit_acl_file(_acl_file(core), remove)
        except Exception as exc:
            failed = _file_error(exc)
    results: list[DeleteAclsResponseFilterResult] = []
    for entry, bindings in zip(filters, removed, strict=True):
        error = entry if isinstance(entry, MiniKafkaError) else failed
        if error is not None:
            results.append({"error_code": int(error.code), "error_message": error.message,
                            "matching_acls": []})
            continue
        matching: list[DeleteAclsResponseMatchingAcl] = [{
            "error_code": 0, "error_message": None, "resource_type": b.resource_type,
            "resource_name": b.resource_name, "pattern_type": b.pattern_type,
            "principal": b.principal, "host": b.host, "operation": b.operation,
            "permission_type": b.permission_type} for b in bindings]
        results.append({"error_code": 0, "error_message": None, "matching_acls": matching})
    respond({"throttle_time_ms": 0, "filter_results": results})


ACL_HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_ACLS: serves(handle_describe_acls),
    ApiKey.CREATE_ACLS: serves(handle_create_acls),
    ApiKey.DELETE_ACLS: serves(handle_delete_acls),
}
