"""Handler of OffsetDelete (API 47, v0): delete a consumer group's committed offsets of
some partitions, on the group's coordinator.

Contract (Kafka's ``handleOffsetDelete``): ACLs first: Delete on the group (else the
top-level GROUP_AUTHORIZATION_FAILED), Read on each topic (else that topic's partitions
answer TOPIC_AUTHORIZATION_FAILED); a topic name that is not a valid name answers
UNKNOWN_TOPIC_OR_PARTITION for its partitions.  The rest goes to
:meth:`broker.group.coordinator.GroupCoordinator.delete_offsets` (coordinator errors,
GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a non-consumer group with members at the top
level; per partition GROUP_SUBSCRIBED_TO_TOPIC for a topic the members of a consumer
group subscribe to, else the tombstone write's result), answered once the tombstones
are written.

Costs: O(partitions named) plus one append to the group's offsets partition.
Thread-safety: the broker's event loop only.
"""

from __future__ import annotations

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
)
from clients.protocol.topics import TopicPartition, topic_name_error


def handle_offset_delete(core: HandlerCore, body: OffsetDeleteRequest,
                         respond: Respond[OffsetDeleteResponse], ctx: RequestContext) -> None:
    group_id = body["group_id"]
    if not ctx.allowed("Delete", "Group", group_id):
        respond({"error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                 "throttle_time_ms": 0, "topics": []})
        return
    refused: dict[TopicPartition, ErrorCode] = {}
    wanted: list[TopicPartition] = []
    for topic in body["topics"]:
        name = topic["name"]
        code = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if topic_name_error(name) is not None
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if not ctx.allowed("Read", "Topic", name) else None)
        for p in topic["partitions"]:
            tp = TopicPartition(name, p["partition_index"])
            if code is None:
                wanted.append(tp)
            else:
                refused[tp] = code

    def answer(group_error: ErrorCode, results: dict[TopicPartition, ErrorCode]) -> None:
        if group_error != ErrorCode.NONE:
            respond({"error_code": int(group_error), "throttle_time_ms": 0, "topics": []})
            return
        by_topic: dict[str, list[OffsetDeleteResponsePartition]] = {}
        for tp, code in [*results.items(), *refused.items()]:
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "error_code": int(code)})
        respond({"error_code": 0, "throttle_time_ms": 0,
                 "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})

    core.groups.coordinator.delete_offsets(group_id, wanted, answer)


OFFSET_DELETE_HANDLERS: dict[int, Handler] = {
    ApiKey.OFFSET_DELETE: serves(handle_offset_delete),
}
