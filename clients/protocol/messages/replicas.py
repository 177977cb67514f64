"""Replica placement admin APIs: ElectLeaders (KIP-183, unclean elections KIP-460).

Versions served: ElectLeaders 0-2 (flexible 2+); Kafka's layout, field names in
snake_case.  ``election_type`` (v1+; v0 means preferred): 0 preferred, 1 unclean.
``topic_partitions`` null asks for every partition.  No tagged extras of ours.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import INT8, INT16, INT32, STRING, Array, Field, Struct

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
