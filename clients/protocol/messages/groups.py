"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

Versions served (first flexible version in brackets, Kafka's): FindCoordinator 0-4 (3+),
JoinGroup 0-9 (6+), SyncGroup 0-5 (4+), Heartbeat 0-4 (4+), LeaveGroup 0-5 (4+),
OffsetCommit 2-9 (8+), OffsetFetch 1-9 (6+), ListGroups 0-5 (3+), DescribeGroups 0-5 (5+),
DeleteGroups 0-2 (2+), OffsetDelete 0 (never flexible, as in Kafka).  Kafka's layouts at
those versions, including its version-dependent shapes: FindCoordinator v4 batches
``coordinator_keys`` / ``coordinators`` in place of ``key`` and the single answer;
LeaveGroup v3 replaces ``member_id`` by ``members``; OffsetFetch v8 batches ``groups`` in
place of ``group_id`` / ``topics``; OffsetCommit v9's ``generation_id`` is a KIP-848
member epoch and OffsetFetch v9 names the member (``member_id``, ``member_epoch``).
Not served: OffsetCommit v10 and OffsetFetch v10 (topic ids), DescribeGroups v6.
Field names are Kafka's in snake_case, except OffsetCommit's
``generation_id`` (Kafka: generation_id_or_member_epoch).

Our extra, a tagged field with a tag from 1000 up and so only in flexible versions:
``error_message`` (tag ``TAG_ERROR_MESSAGE``, the error's text next to Kafka's error code,
set by the group coordinator, read by the consumer's coordinator and offset committer) in
the JoinGroup, SyncGroup, Heartbeat and LeaveGroup responses, per partition in the
OffsetCommit and OffsetFetch responses, and per group in the DescribeGroups v5 response
(Kafka carries it there from v6, at the same place in field order).  Kafka's own
``error_message`` fields (FindCoordinator v1+) are untagged, as Kafka declares them.

Defaults are Kafka's: nullable fields whose Kafka default is null default to None; a
nullable string without a Kafka default defaults to "" as in Kafka.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.extras import TAG_ERROR_MESSAGE, error_message_field
from clients.protocol.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Field,
    Struct,
)


def _error_message(flexible: str) -> Field:
    """Our extra: the error's text next to Kafka's error code (flexible versions only)."""
    return error_message_field(flexible)


FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR, "FindCoordinator", "0-4", "3+",
    request=Struct(
        Field("key", STRING, "0-3"),  # the group id (key_type 0) or transactional id (1)
        Field("key_type", INT8, "1+"),
        Field("coordinator_keys", Array(STRING), "4+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16, "0-3"),
        Field("error_message", STRING, "1-3", nullable="1-3", default=""),
        Field("node_id", INT32, "0-3"),
        Field("host", STRING, "0-3"),
        Field("port", INT32, "0-3"),
        Field("coordinators", Array(Struct(
            Field("key", STRING),
            Field("node_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="4+", default=""),
        )), "4+"),
    ),
)  # fmt: skip

JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP, "JoinGroup", "0-9", "6+",
    request=Struct(
        Field("group_id", STRING),
        Field("session_timeout_ms", INT32),
        Field("rebalance_timeout_ms", INT32, "1+", default=-1),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "5+", nullable="5+", default=None),
        Field("protocol_type", STRING),
        Field("protocols", Array(Struct(
            Field("name", STRING),
            Field("metadata", BYTES),
        ))),
        Field("reason", STRING, "8+", nullable="8+", default=None),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "2+"),
        Field("error_code", INT16),
        Field("generation_id", INT32, default=-1),
        Field("protocol_type", STRING, "7+", nullable="7+", default=None),
        Field("protocol_name", STRING, nullable="7+"),
        Field("leader", STRING),
        Field("skip_assignment", BOOL, "9+"),
        Field("member_id", STRING),
        Field("members", Array(Struct(  # filled for the leader only
            Field("member_id", STRING),
            Field("group_instance_id", STRING, "5+", nullable="5+", default=None),
            Field("metadata", BYTES),
        ))),
        _error_message("6+"),
    ),
)  # fmt: skip

SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP, "SyncGroup", "0-5", "4+",
    request=Struct(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
        Field("protocol_type", STRING, "5+", nullable="5+", default=None),
        Field("protocol_name", STRING, "5+", nullable="5+", default=None),
        Field("assignments", Array(Struct(  # the leader's only
            Field("member_id", STRING),
            Field("assignment", BYTES),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("protocol_type", STRING, "5+", nullable="5+", default=None),
        Field("protocol_name", STRING, "5+", nullable="5+", default=None),
        Field("assignment", BYTES),
        _error_message("4+"),
    ),
)  # fmt: skip

HEARTBEAT = Api(
    ApiKey.HEARTBEAT, "Heartbeat", "0-4", "4+",
    request=Struct(
        Field("group_id", STRING),
        Field("generation_id", INT32),
        Field("member_id", STRING),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        _error_message("4+"),
    ),
)  # fmt: skip

LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP, "LeaveGroup", "0-5", "4+",
    request=Struct(
        Field("group_id", STRING),
        Field("member_id", STRING, "0-2"),
        Field("members", Array(Struct(
            Field("member_id", STRING),
            Field("group_instance_id", STRING, nullable="3+", default=None),
            Field("reason", STRING, "5+", nullable="5+", default=None),
        )), "3+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("members", Array(Struct(
            Field("member_id", STRING),
            Field("group_instance_id", STRING, nullable="3+", default=""),
            Field("error_code", INT16),
        )), "3+"),
        _error_message("4+"),
    ),
)  # fmt: skip

# v9 is the same layout, but its generation_id is the member epoch of a consumer group
# (KIP-848, broker.group.consumer); v10 names topics by id (not served).  v0-1 are gone
# from Kafka 4, so commit_timestamp (v1 only) is not declared.
OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT, "OffsetCommit", "2-9", "8+",
    request=Struct(
        Field("group_id", STRING),
        # Kafka: generation_id_or_member_epoch; -1 with member_id "": a commit from outside
        Field("generation_id", INT32, "1+", default=-1),
        Field("member_id", STRING, "1+"),
        Field("group_instance_id", STRING, "7+", nullable="7+", default=None),
        Field("retention_time_ms", INT64, "2-4", default=-1),  # -1: the broker's default
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "6+", default=-1),
                Field("committed_metadata", STRING, nullable="0+", default=""),
            ))),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "3+"),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                _error_message("8+"),
            ))),
        ))),
    ),
)  # fmt: skip

# v9 adds a consumer group's member id and epoch (KIP-848, checked when given); v10 names
# topics by id (not served).  v0 is gone from Kafka 4.
OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH, "OffsetFetch", "1-9", "6+",
    request=Struct(
        Field("group_id", STRING, "0-7"),
        # null (v2+): every partition the group has offsets for
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        )), "0-7", nullable="2-7"),
        Field("groups", Array(Struct(
            Field("group_id", STRING),
            # v9: a consumer group's member (KIP-848); null / -1: not checked
            Field("member_id", STRING, "9+", nullable="9+", default=None),
            Field("member_epoch", INT32, "9+", default=-1),
            Field("topics", Array(Struct(
                Field("name", STRING),
                Field("partition_indexes", Array(INT32)),
            )), nullable="8+"),
        )), "8+"),
        Field("require_stable", BOOL, "7+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "3+"),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "5+", default=-1),
                Field("metadata", STRING, nullable="0+", default=""),
                Field("error_code", INT16),
                _error_message("6+"),
            ))),
        )), "0-7"),
        Field("error_code", INT16, "2-7"),  # after the topics, unlike most responses
        Field("groups", Array(Struct(
            Field("group_id", STRING),
            Field("topics", Array(Struct(
                Field("name", STRING),
                Field("partitions", Array(Struct(
                    Field("partition_index", INT32),
                    Field("committed_offset", INT64),
                    Field("committed_leader_epoch", INT32, default=-1),
                    Field("metadata", STRING, nullable="8+", default=""),
                    Field("error_code", INT16),
                    _error_message("8+"),
                ))),
            ))),
            Field("error_code", INT16),
        )), "8+"),
    ),
)  # fmt: skip

LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS, "ListGroups", "0-5", "3+",
    request=Struct(
        Field("states_filter", Array(STRING), "4+"),  # empty: every state
        Field("types_filter", Array(STRING), "5+"),  # empty: every type
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16),
        Field("groups", Array(Struct(
            Field("group_id", STRING),
            Field("protocol_type", STRING),
            Field("group_state", STRING, "4+"),
            Field("group_type", STRING, "5+"),
        ))),
    ),
)  # fmt: skip

# v6 (Kafka 4) moves error_message into the field order, where it is declared here; we
# serve up to v5, where it is our tagged extra.
DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS, "DescribeGroups", "0-5", "5+",
    request=Struct(
        Field("groups", Array(STRING)),
        Field("include_authorized_operations", BOOL, "3+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("groups", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, "5+", nullable="5+", tag=TAG_ERROR_MESSAGE,
                  tagged="5", default=None),
            Field("group_id", STRING),
            Field("group_state", STRING),
            Field("protocol_type", STRING),
            Field("protocol_data", STRING),  # the chosen protocol (assignor) name
            Field("members", Array(Struct(
                Field("member_id", STRING),
                Field("group_instance_id", STRING, "4+", nullable="4+", default=None),
                Field("client_id", STRING),
                Field("client_host", STRING),
                Field("member_metadata", BYTES),
                Field("member_assignment", BYTES),
            ))),
            Field("authorized_operations", INT32, "3+", default=-(1 << 31)),
        ))),
    ),
)  # fmt: skip

DELETE_GROUPS = Api(
    ApiKey.DELETE_GROUPS, "DeleteGroups", "0-2", "2+",
    request=Struct(
        Field("groups_names", Array(STRING)),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(
            Field("group_id", STRING),
            Field("error_code", INT16),
        ))),
    ),
)  # fmt: skip

OFFSET_DELETE = Api(
    ApiKey.OFFSET_DELETE, "OffsetDelete", "0", None,
    request=Struct(
        Field("group_id", STRING),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
            ))),
        ))),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("throttle_time_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
            ))),
        ))),
    ),
)  # fmt: skip
