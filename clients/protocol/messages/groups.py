"""Consumer group APIs: offsets, coordinator lookup, membership and group listing.

OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
DescribeGroups and ListGroups, served by the group coordinator.

Field conventions and how to add a version: :mod:`clients.protocol.registry`.  Costs: the
codecs of these APIs are compiled when this module is imported (O(fields x versions), well under
a millisecond).  Thread/process safety: the declarations are immutable after import.
"""

from __future__ import annotations

from clients.protocol.api_keys import ERROR_MESSAGE as _ERR
from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.api_keys import results_of as _results
from clients.protocol.api_keys import topics_of as _topics
from clients.protocol.schema import Field, Struct
from clients.protocol.wire_types import (
    Array,
    Bool,
    Bytes,
    Int8,
    Int16,
    Int32,
    Int64,
    NullableStr,
    Str,
)

_PARTITION_ERROR = Struct(partition_index=Int32, error_code=Int16, error_message=_ERR)

OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT, "OffsetCommit", 0, 0,
    request=Struct(
        group_id=Str,
        generation_id=Int32,
        member_id=Str,
        group_instance_id=Field(NullableStr, default=None),
        topics=_topics(Struct(
            partition_index=Int32,
            committed_offset=Int64,
            committed_leader_epoch=Field(Int32, default=-1),
            committed_metadata=Field(NullableStr, default=None),
        )),
    ),
    response=Struct(topics=_results(_PARTITION_ERROR)),
)  # fmt: skip

OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH, "OffsetFetch", 0, 0,
    request=Struct(
        group_id=Str,
        topics=Array(Struct(name=Str, partition_indexes=Array(Int32)), nullable=True),
        require_stable=Field(Bool, default=False),
    ),
    response=Struct(
        error_code=Field(Int16, default=0),
        topics=_results(Struct(
            partition_index=Int32,
            committed_offset=Int64,
            committed_leader_epoch=Field(Int32, default=-1),
            metadata=Field(NullableStr, default=None),
            error_code=Int16,
            error_message=_ERR,
        )),
    ),
)  # fmt: skip

_COORDINATOR = Struct(error_code=Int16, error_message=_ERR, node_id=Int32, host=Str, port=Int32)
FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 0,
    request=Struct(key=Str, key_type=Field(Int8, default=0)),  # 0 group, 1 transaction
    response=_COORDINATOR,
)  # fmt: skip

_INSTANCE = Field(NullableStr, default=None)  # group_instance_id (static membership)
JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP, "JoinGroup", 0, 0,
    request=Struct(
        group_id=Str,
        session_timeout_ms=Int32,
        rebalance_timeout_ms=Int32,
        member_id=Str,
        group_instance_id=_INSTANCE,
        protocol_type=Str,
        protocols=Array(Struct(name=Str, metadata=Bytes)),
    ),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        generation_id=Int32,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=NullableStr,
        leader=Str,
        member_id=Str,
        members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE, metadata=Bytes)),
    ),
)  # fmt: skip

HEARTBEAT = Api(
    ApiKey.HEARTBEAT, "Heartbeat", 0, 0,
    request=Struct(group_id=Str, generation_id=Int32, member_id=Str,
                   group_instance_id=_INSTANCE),
    response=Struct(error_code=Int16, error_message=_ERR),
)  # fmt: skip

LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 0,
    request=Struct(group_id=Str,
                   members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE))),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE, error_code=Int16)),
    ),
)  # fmt: skip

SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP, "SyncGroup", 0, 0,
    request=Struct(
        group_id=Str,
        generation_id=Int32,
        member_id=Str,
        group_instance_id=_INSTANCE,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=Field(NullableStr, default=None),
        assignments=Array(Struct(member_id=Str, assignment=Bytes)),  # leader only
    ),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=Field(NullableStr, default=None),
        assignment=Bytes,
    ),
)  # fmt: skip

DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 0,
    request=Struct(groups=Array(Str)),
    response=Struct(groups=Array(Struct(
        error_code=Int16,
        error_message=_ERR,
        group_id=Str,
        group_state=Str,
        protocol_type=Str,
        protocol_data=Str,
        members=Array(Struct(
            member_id=Str,
            group_instance_id=_INSTANCE,
            client_id=Str,
            client_host=Str,
            member_metadata=Bytes,
            member_assignment=Bytes,
        )),
    ))),
)  # fmt: skip

LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS, "ListGroups", 0, 0,
    request=Struct(states_filter=Field(Array(Str), default=[])),
    response=Struct(
        error_code=Int16,
        groups=Array(Struct(group_id=Str, protocol_type=Str, group_state=Str)),
    ),
)  # fmt: skip
