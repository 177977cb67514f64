"""Handlers of AlterPartitionReassignments and ListPartitionReassignments: moving a
partition's replicas between brokers (KIP-455), decided by the controller
(:mod:`broker.controller.reassignments`).

Contract (Kafka's): AlterPartitionReassignments needs Alter on the Cluster,
ListPartitionReassignments Describe on it (else CLUSTER_AUTHORIZATION_FAILED at the top).
A partition named twice in one AlterPartitionReassignments: INVALID_REQUEST at the top
(nothing done).  Both are forwarded to the controller as they came and its answer is
ours: per partition NONE (the reassignment started, was replaced or cancelled),
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT or NO_REASSIGNMENT_IN_PROGRESS;
the listing shows each partition in flight with its current replicas and the adding and
removing ones.  A controller that cannot be reached: its error at the top.  A
standalone broker (no controller) has no replicas to move: INVALID_REQUEST /
an empty listing.

How fast a new replica copies the log is bounded on the follower by
``follower_replication_throttled_rate`` (:mod:`broker.replica_fetcher`).

Costs: one round trip to the controller.  Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

from collections import Counter

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.admin.forward import forward
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)


def _alter_error(exc: MiniKafkaError) -> AlterPartitionReassignmentsResponse:
    return {"throttle_time_ms": 0, "error_code": int(exc.code),
            "error_message": exc.message, "responses": []}


def _list_error(exc: MiniKafkaError) -> ListPartitionReassignmentsResponse:
    return {"throttle_time_ms": 0, "error_code": int(exc.code),
            "error_message": exc.message, "topics": []}


def handle_alter_partition_reassignments(
        core: HandlerCore, body: AlterPartitionReassignmentsRequest,
        respond: Respond[AlterPartitionReassignmentsResponse], ctx: RequestContext) -> None:
    if not ctx.allowed("Alter", "Cluster", CLUSTER_RESOURCE):
        respond(_alter_error(MiniKafkaError(
            "not authorized to Alter the cluster (needed to reassign partitions)",
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
        return
    named = Counter((t["name"], p["partition_index"])
                    for t in body["topics"] for p in t["partitions"])
    twice = sorted(k for k, n in named.items() if n > 1)
    if twice:
        respond(_alter_error(MiniKafkaError(f"partitions named more than once: {twice}",
                                            ErrorCode.INVALID_REQUEST)))
        return
    if not core.controller_mode or core.controller is None:
        respond(_alter_error(MiniKafkaError("a standalone broker has no replicas to move",
                                            ErrorCode.INVALID_REQUEST)))
        return
    forward(core, ApiKey.ALTER_PARTITION_REASSIGNMENTS, body, body["timeout_ms"], respond,
            _alter_error)


def handle_list_partition_reassignments(
        core: HandlerCore, body: ListPartitionReassignmentsRequest,
        respond: Respond[ListPartitionReassignmentsResponse], ctx: RequestContext) -> None:
    if not ctx.allowed("Describe", "Cluster", CLUSTER_RESOURCE):
        respond(_list_error(MiniKafkaError(
            "not authorized to Describe the cluster (needed to list reassignments)",
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
        return
    if not core.controller_mode or core.controller is None:
        respond({"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []})
        return
    forward(core, ApiKey.LIST_PARTITION_REASSIGNMENTS, body, body["timeout_ms"], respond,
            _list_error)


REASSIGNMENT_HANDLERS: dict[int, Handler] = {
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: serves(handle_alter_partition_reassignments),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: serves(handle_list_partition_reassignments),
}
