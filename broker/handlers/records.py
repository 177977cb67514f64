"""Handler of DeleteRecords: the leader moves a partition's log start offset.

Per partition (errors per partition, Kafka's codes): an internal topic's records are not
deleted by clients (INVALID_TOPIC_EXCEPTION, Kafka's rule), the partition must be led here
(NOT_LEADER_OR_FOLLOWER; unknown: UNKNOWN_TOPIC_OR_PARTITION), its cleanup policy must
include delete (a compact-only topic: POLICY_VIOLATION, Kafka's ``config.delete`` rule;
``compact,delete`` is fine), and the
offset must be in ``[0, high watermark]`` (-1 means the high watermark; otherwise
OFFSET_OUT_OF_RANGE).  Records below the offset become unreadable at once (fetches below
it get OFFSET_OUT_OF_RANGE, ListOffsets -2 answers it) and whole segments below it are
deleted by the next retention pass; an offset at or below the current log start changes
nothing.  The new log start offsets are checkpointed before the answer, so a restart
keeps them.  Followers learn the new log start offset from their next Fetch answer
(``log_start_offset``) and move theirs.

Difference from Kafka: Kafka answers once every replica has moved its log start offset
(``low_watermark`` is the lowest of them, waiting up to ``timeout_ms``); we answer once the
leader has, with the leader's log start offset as ``low_watermark``.

Costs: O(partitions) plus one checkpoint write when something moved.  Thread-safety: run
on the broker's event loop thread only.
"""

from __future__ import annotations

from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import (
    Handler,
    RequestContext,
    as_minikafka_error,
    require,
    serves,
)
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsResponsePartition,
    DeleteRecordsResponseTopic,
)
from clients.protocol.topics import TopicPartition, internal_topic_refusal

HIGH_WATERMARK = -1


def _delete_before(core: HandlerCore, topic: str, index: int, offset: int) -> tuple[int, bool]:
    """Move the log start of ``topic-index`` to ``offset``; (low watermark, moved)."""
    partition = core.partition_or_error(topic, index)
    if not partition.is_leader:
        raise MiniKafkaError(f"broker {core.config.node_id} is not the leader of "
                             f"{topic}-{index}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
    if not partition.log.config.delete:
        raise MiniKafkaError(f"{topic} is compacted: its records cannot be deleted by offset",
                             ErrorCode.POLICY_VIOLATION)
    high_watermark = partition.high_watermark
    if offset == HIGH_WATERMARK:
        offset = high_watermark
    if not 0 <= offset <= high_watermark:
        raise MiniKafkaError(f"{topic}-{index}: offset {offset} is outside [0, the high "
                             f"watermark {high_watermark}]", ErrorCode.OFFSET_OUT_OF_RANGE)
    if offset <= partition.log_start_offset:
        return partition.log_start_offset, False
    partition.log.maybe_increment_log_start_offset(offset)
    partition.sync_log_start()
    return partition.log_start_offset, True


def handle_delete_records(core: HandlerCore, body: DeleteRecordsRequest,
                          respond: Respond[DeleteRecordsResponse], ctx: RequestContext) -> None:
    moved: list[TopicPartition] = []
    topics: list[DeleteRecordsResponseTopic] = []
    for topic in body["topics"]:
        parts: list[DeleteRecordsResponsePartition] = []
        for request in topic["partitions"]:
            index = request["partition_index"]
            result: DeleteRecordsResponsePartition = {"partition_index": index,
                                                      "low_watermark": -1, "error_code": 0}
            try:
                require(ctx, "Delete", "Topic", topic["name"])
                refused = internal_topic_refusal(topic["name"], "delete records of")
                if refused is not None:
                    raise refused
                result["low_watermark"], changed = _delete_before(core, topic["name"], index,
                                                                  request["offset"])
                if changed:
                    moved.append(TopicPartition(topic["name"], index))
            except Exception as exc:
                # DeleteRecords has no error_message field
                result["error_code"] = int(as_minikafka_error(exc).code)
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    if moved:
        core.log_manager.checkpoint_log_start_offsets()
        for key in moved:
            core.wake_partition(key)  # parked fetches below the new start answer now
    respond({"throttle_time_ms": 0, "topics": topics})


RECORDS_HANDLERS: dict[int, Handler] = {
    ApiKey.DELETE_RECORDS: serves(handle_delete_records),
}
