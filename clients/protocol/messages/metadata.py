"""Cluster and topic APIs: ApiVersions, Metadata.

Layouts follow Kafka's protocol at the versions served (docs/compatibility.md).  Our own
extras travel as tagged fields with tags from 1000 up (Kafka clients skip unknown tags),
so they exist only in flexible versions; each says who sets and reads it.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    STRING,
    UUID,
    Array,
    Field,
    Struct,
)

# Tags of our extras (never reused for another meaning).
TAG_FENCED = 1000
TAG_UNCLEAN_ELECTED = 1001
TAG_CONFIGS = 1002

API_VERSIONS = Api(
    ApiKey.API_VERSIONS, "ApiVersions", "0-3", "3+",
    request=Struct(
        Field("client_software_name", STRING, "3+"),
        Field("client_software_version", STRING, "3+"),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field("api_keys", Array(Struct(
            Field("api_key", INT16),
            Field("min_version", INT16),
            Field("max_version", INT16),
        ))),
        Field("throttle_time_ms", INT32, "1+"),
        Field("supported_features", Array(Struct(
            Field("name", STRING),
            Field("min_version", INT16),
            Field("max_version", INT16),
        )), "3+", tag=0, tagged="3+"),
        Field("finalized_features_epoch", INT64, "3+", tag=1, tagged="3+", default=-1),
        Field("finalized_features", Array(Struct(
            Field("name", STRING),
            Field("max_version_level", INT16),
            Field("min_version_level", INT16),
        )), "3+", tag=2, tagged="3+"),
        Field("zk_migration_ready", BOOL, "3+", tag=3, tagged="3+"),
    ),
)  # fmt: skip

METADATA = Api(
    ApiKey.METADATA, "Metadata", "0-12", "9+",
    request=Struct(
        # null (v1+): all topics; v0 has no null, an empty array means all topics
        Field("topics", Array(Struct(
            Field("topic_id", UUID, "10+"),
            Field("name", STRING, nullable="10+"),
        )), nullable="1+", default=None),
        Field("allow_auto_topic_creation", BOOL, "4+", default=True),
        Field("include_cluster_authorized_operations", BOOL, "8-10"),
        Field("include_topic_authorized_operations", BOOL, "8+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "3+"),
        Field("brokers", Array(Struct(
            Field("node_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("rack", STRING, "1+", nullable="1+", default=None),
            # ours: the controller marks fenced brokers in its answers to brokers
            Field("fenced", BOOL, "9+", tag=TAG_FENCED, tagged="9+"),
        ))),
        Field("cluster_id", STRING, "2+", nullable="2+", default=None),
        Field("controller_id", INT32, "1+", default=-1),
        Field("topics", Array(Struct(
            Field("error_code", INT16),
            Field("name", STRING, nullable="12+"),
            Field("topic_id", UUID, "10+"),
            Field("is_internal", BOOL, "1+"),
            Field("partitions", Array(Struct(
                Field("error_code", INT16),
                Field("partition_index", INT32),
                Field("leader_id", INT32),
                Field("leader_epoch", INT32, "7+", default=-1),
                Field("replica_nodes", Array(INT32)),
                Field("isr_nodes", Array(INT32)),
                Field("offline_replicas", Array(INT32), "5+"),
                # ours: the controller's answer says the leader came from an unclean election
                Field("unclean_elected", BOOL, "9+", tag=TAG_UNCLEAN_ELECTED, tagged="9+"),
            ))),
            Field("topic_authorized_operations", INT32, "8+", default=-(1 << 31)),
            # ours: the topic's config overrides (Kafka clients use DescribeConfigs)
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("value", STRING),
            )), "9+", tag=TAG_CONFIGS, tagged="9+"),
        ))),
        Field("cluster_authorized_operations", INT32, "8-10", default=-(1 << 31)),
    ),
)  # fmt: skip
