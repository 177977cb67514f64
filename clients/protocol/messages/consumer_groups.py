"""The KIP-848 consumer group protocol's own APIs: ConsumerGroupHeartbeat and
ConsumerGroupDescribe.

Versions served (flexible from v0, as Kafka's): ConsumerGroupHeartbeat 0-1 (v1 adds
``subscribed_topic_regex`` and lets the client generate its member id, KIP-1082),
ConsumerGroupDescribe 0 (v1's ``member_type`` is not declared).  Kafka's layouts, field
names in snake_case.  Topics are named by id (UUID) in assignments and in a member's
owned partitions; ConsumerGroupDescribe also gives each assigned topic's name.  The
OffsetCommit v9 / OffsetFetch v9 that go with the protocol (member epochs) are declared
with their older versions in :mod:`clients.protocol.messages.groups`.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import BOOL, INT16, INT32, STRING, UUID, Array, Field, Struct

_ASSIGNED_TOPIC = Struct(
    Field("topic_id", UUID),
    Field("partitions", Array(INT32)),
    label="ConsumerGroupTopicPartitions",
)  # fmt: skip

CONSUMER_GROUP_HEARTBEAT = Api(
    ApiKey.CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat", "0-1", "0+",
    request=Struct(
        Field("group_id", STRING),
        # v0: "" to join (the coordinator generates it); v1: the client's own UUID
        Field("member_id", STRING),
        # 0 to join, -1 to leave, -2 a static member leaving for now; else the epoch held
        Field("member_epoch", INT32),
        Field("instance_id", STRING, nullable="0+", default=None),
        Field("rack_id", STRING, nullable="0+", default=None),
        Field("rebalance_timeout_ms", INT32, default=-1),  # -1: unchanged
        Field("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
        Field("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
        Field("server_assignor", STRING, nullable="0+", default=None),
        # null: unchanged since the last heartbeat
        Field("topic_partitions", Array(_ASSIGNED_TOPIC), nullable="0+", default=None),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("member_id", STRING, nullable="0+", default=None),
        Field("member_epoch", INT32),
        Field("heartbeat_interval_ms", INT32),
        # null: unchanged since the last answer
        Field("assignment", Struct(
            Field("topic_partitions", Array(_ASSIGNED_TOPIC)),
        ), nullable="0+", default=None),
    ),
)  # fmt: skip

_DESCRIBED_ASSIGNMENT = Struct(
    Field("topic_partitions", Array(Struct(
        Field("topic_id", UUID),
        Field("topic_name", STRING),
        Field("partitions", Array(INT32)),
    ))),
    label="ConsumerGroupDescribedAssignment",
)  # fmt: skip

CONSUMER_GROUP_DESCRIBE = Api(
    ApiKey.CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe", "0", "0+",
    request=Struct(
        Field("group_ids", Array(STRING)),
        Field("include_authorized_operations", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("groups", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
            Field("group_id", STRING),
            Field("group_state", STRING),
            Field("group_epoch", INT32),
            Field("assignment_epoch", INT32),
            Field("assignor_name", STRING),
            Field("members", Array(Struct(
                Field("member_id", STRING),
                Field("instance_id", STRING, nullable="0+", default=None),
                Field("rack_id", STRING, nullable="0+", default=None),
                Field("member_epoch", INT32),
                Field("client_id", STRING),
                Field("client_host", STRING),
                Field("subscribed_topic_names", Array(STRING)),
                Field("subscribed_topic_regex", STRING, nullable="0+", default=None),
                Field("assignment", _DESCRIBED_ASSIGNMENT, default={"topic_partitions": []}),
                Field("target_assignment", _DESCRIBED_ASSIGNMENT,
                      default={"topic_partitions": []}),
            ))),
            Field("authorized_operations", INT32, default=-(1 << 31)),
        ))),
    ),
)  # fmt: skip

