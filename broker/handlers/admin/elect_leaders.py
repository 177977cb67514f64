"""Handler of ElectLeaders: an operator asks the controller to elect the preferred (or,
for offline partitions, an unclean) leader.

Contract (Kafka's): the request needs Alter on the Cluster (else CLUSTER_AUTHORIZATION_FAILED
at the top, v1+, and for every named partition).  In controller mode the request goes to
the controller as it came, which decides with its election rules
(:meth:`broker.controller.state.ControllerState.elect_leaders`: preferred only when
``replicas[0]`` is live, in the ISR and not cut by log recovery; unclean only where the
topic sets ``unclean.leader.election.enable``; no replica that recovery cut leads while
another replica may hold more), and its answer is ours: per partition NONE,
ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE or
UNKNOWN_TOPIC_OR_PARTITION, with the reason in ``error_message``.  The answer comes once
the controller has committed the change; brokers and clients see the new leaders with
their next metadata update (Kafka's behaviour too).  A controller that cannot be reached:
its error for every named partition.  A standalone broker (no controller) leads every
partition it has: ELECTION_NOT_NEEDED (UNKNOWN_TOPIC_OR_PARTITION for others).  An
``election_type`` other than 0 or 1: INVALID_REQUEST at the top.

Costs: one round trip to the controller.  Thread-safety: run on the broker's event loop
thread only.
"""

from __future__ import annotations

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.admin.forward import forward
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponseReplicaElectionResult,
)


def _every_partition(body: ElectLeadersRequest, code: ErrorCode,
                     message: str) -> list[ElectLeadersResponseReplicaElectionResult]:
    return [{"topic": t["topic"], "partition_result": [
        {"partition_id": p, "error_code": int(code), "error_message": message}
        for p in dict.fromkeys(t["partitions"])]} for t in body["topic_partitions"] or ()]


def _standalone(core: HandlerCore, body: ElectLeadersRequest
                ) -> list[ElectLeadersResponseReplicaElectionResult]:
    out: list[ElectLeadersResponseReplicaElectionResult] = []
    for t in body["topic_partitions"] or ():
        topic = core.registry.get(t["topic"])
        out.append({"topic": t["topic"], "partition_result": [
            {"partition_id": p, "error_code": int(ErrorCode.ELECTION_NOT_NEEDED),
             "error_message": "a standalone broker leads every partition"}
            if topic is not None and 0 <= p < topic.num_partitions else
            {"partition_id": p, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
             "error_message": f"{t['topic']}-{p} does not exist"}
            for p in dict.fromkeys(t["partitions"])]})
    return out


def handle_elect_leaders(core: HandlerCore, body: ElectLeadersRequest,
                         respond: Respond[ElectLeadersResponse], ctx: RequestContext) -> None:
    if not ctx.allowed("Alter", "Cluster", CLUSTER_RESOURCE):
        message = "not authorized to Alter the cluster (needed to elect leaders)"
        respond({"throttle_time_ms": 0,
                 "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                 "replica_election_results": _every_partition(
                     body, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, message)})
        return
    if body["election_type"] not in (0, 1):
        respond({"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                 "replica_election_results": []})
        return
    if not core.controller_mode or core.controller is None:
        respond({"throttle_time_ms": 0, "error_code": 0,
                 "replica_election_results": _standalone(core, body)})
        return

    def failed(exc: MiniKafkaError) -> ElectLeadersResponse:
        return {"throttle_time_ms": 0, "error_code": 0,
                "replica_election_results": _every_partition(body, exc.code, exc.message)}

    forward(core, ApiKey.ELECT_LEADERS, body, body["timeout_ms"], respond, failed)


ELECT_LEADERS_HANDLERS: dict[int, Handler] = {
    ApiKey.ELECT_LEADERS: serves(handle_elect_leaders),
}
