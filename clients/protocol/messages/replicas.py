"""Replica placement admin APIs: ElectLeaders (KIP-183, unclean elections KIP-460),
AlterPartitionReassignments and ListPartitionReassignments (KIP-455).

Versions served: ElectLeaders 0-2 (flexible 2+), AlterPartitionReassignments 0 and
ListPartitionReassignments 0 (flexible 0+); Kafka's layouts, field names in snake_case.
``election_type`` (v1+; v0 means preferred): 0 preferred, 1 unclean.
``topic_partitions`` null asks for every partition.  A reassignment's ``replicas`` null
cancels the partition's reassignment; ListPartitionReassignments' ``topics`` null lists
every reassignment.  No tagged extras of ours.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import INT8, INT16, INT32, STRING, Array, Field, Struct

_TOP_ERROR = (Field("error_code", INT16), Field("error_message", STRING, nullable="0+"))

ELECT_LEADERS = Api(
    ApiKey.ELECT_LEADERS, "ElectLeaders", "0-2", "2+",
    request=Struct(
        Field("election_type", INT8, "1+"),
        Field("topic_partitions", Array(Struct(
            Field("topic", STRING),
            Field("partitions", Array(INT32)),
        )), nullable="0+"),
        Field("timeout_ms", INT32, default=60_000),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "1+"),
        Field("replica_election_results", Array(Struct(
            Field("topic", STRING),
            Field("partition_result", Array(Struct(
                Field("partition_id", INT32),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
            ))),
        ))),
    ),
)  # fmt: skip

ALTER_PARTITION_REASSIGNMENTS = Api(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments", "0", "0+",
    request=Struct(
        Field("timeout_ms", INT32, default=60_000),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("replicas", Array(INT32), nullable="0+"),  # null: cancel
            ))),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        *_TOP_ERROR,
        Field("responses", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                *_TOP_ERROR,
            ))),
        ))),
    ),
)  # fmt: skip

LIST_PARTITION_REASSIGNMENTS = Api(
    ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments", "0", "0+",
    request=Struct(
        Field("timeout_ms", INT32, default=60_000),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
        )), nullable="0+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        *_TOP_ERROR,
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("replicas", Array(INT32)),
                Field("adding_replicas", Array(INT32)),
                Field("removing_replicas", Array(INT32)),
            ))),
        ))),
    ),
)  # fmt: skip
