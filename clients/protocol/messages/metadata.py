"""Cluster and topic APIs: ApiVersions, Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeCluster, DescribeLogDirs.

Versions served: ApiVersions 0-3, Metadata 0-12, CreateTopics 2-7, DeleteTopics 1-6,
CreatePartitions 0-3, DescribeCluster 0-1, DescribeLogDirs 1-4.  Topic ids (Kafka's
UUIDs, :mod:`clients.protocol.topics`): Metadata v10+ answers with them (and v10+ may
ask by them), CreateTopics v7 answers with them, DeleteTopics v6 names topics by name or
by id.

Layouts follow Kafka's protocol at the versions served (docs/compatibility.md).  Our own
extras travel as tagged fields with tags from 1000 up (Kafka clients skip unknown tags),
so they exist only in flexible versions; each says who sets and reads it:

- Metadata v9+: ``fenced`` (broker), ``unclean_elected`` (partition), ``configs`` (topic).
- DescribeLogDirs v2+, per partition (replica) held by the answering broker:
  ``log_start_offset``, ``log_end_offset``, ``high_watermark``, ``leader_id``,
  ``leader_epoch``, ``isr`` (set by the broker's handler, read by ``minikafka cluster
  status``).  Kafka's shape has only the size and an offset lag.

Nullable fields default to None (null), as in the rest of :mod:`clients.protocol.messages`.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.extras import (
    TAG_CONFIGS,
    TAG_DAMAGED_FROM,
    TAG_FENCED,
    TAG_HIGH_WATERMARK,
    TAG_ISR,
    TAG_LEADER_EPOCH,
    TAG_LEADER_ID,
    TAG_LOG_END_OFFSET,
    TAG_LOG_START_OFFSET,
    TAG_OFFLINE_REASON,
    TAG_RECOVERY_CUT,
    TAG_UNCLEAN_ELECTED,
)
from clients.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    UUID,
    Array,
    Field,
    Struct,
)

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
                # ours: why the controller leaves the partition without a leader
                Field("offline_reason", STRING, "9+", nullable="9+", tag=TAG_OFFLINE_REASON,
                      tagged="9+", default=None),
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

# v7 answers with topic ids; v2 is Kafka 4's floor.
CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS, "CreateTopics", "2-7", "5+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("num_partitions", INT32),  # -1: the broker's default (v4+) or assignments
            Field("replication_factor", INT16),  # -1: the broker's default (v4+)
            Field("assignments", Array(Struct(
                Field("partition_index", INT32),
                Field("broker_ids", Array(INT32)),
            ))),
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
            ))),
        ))),
        Field("timeout_ms", INT32, default=60000),
        Field("validate_only", BOOL, "1+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "2+"),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("topic_id", UUID, "7+"),
            Field("error_code", INT16),
            Field("error_message", STRING, "1+", nullable="0+"),
            Field("topic_config_error_code", INT16, "5+", tag=0, tagged="5+"),
            Field("num_partitions", INT32, "5+", default=-1),
            Field("replication_factor", INT16, "5+", default=-1),
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("value", STRING, nullable="5+"),
                Field("read_only", BOOL),
                Field("config_source", INT8, default=-1),
                Field("is_sensitive", BOOL),
            )), "5+", nullable="5+"),
        ))),
    ),
)  # fmt: skip

# v6 names each topic by name or by id; v0 is gone from Kafka 4.
DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS, "DeleteTopics", "1-6", "4+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("name", STRING, "6+", nullable="6+", default=None),
            Field("topic_id", UUID, "6+"),
        )), "6+"),
        Field("topic_names", Array(STRING), "0-5"),
        Field("timeout_ms", INT32),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "1+"),
        Field("responses", Array(Struct(
            Field("name", STRING, nullable="6+"),
            Field("topic_id", UUID, "6+"),
            Field("error_code", INT16),
            Field("error_message", STRING, "5+", nullable="5+", default=None),
        ))),
    ),
)  # fmt: skip

CREATE_PARTITIONS = Api(
    ApiKey.CREATE_PARTITIONS, "CreatePartitions", "0-3", "2+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("count", INT32),  # the new total number of partitions
            # null: the broker places the new partitions; else one entry per new partition
            Field("assignments", Array(Struct(
                Field("broker_ids", Array(INT32)),
            )), nullable="0+"),
        ))),
        Field("timeout_ms", INT32),
        Field("validate_only", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(
            Field("name", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+", default=None),
        ))),
    ),
)  # fmt: skip

# v2 adds fenced brokers (not served).
DESCRIBE_CLUSTER = Api(
    ApiKey.DESCRIBE_CLUSTER, "DescribeCluster", "0-1", "0+",
    request=Struct(
        Field("include_cluster_authorized_operations", BOOL),
        Field("endpoint_type", INT8, "1+", default=1),  # 1 brokers, 2 controllers
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+", default=None),
        Field("endpoint_type", INT8, "1+", default=1),
        Field("cluster_id", STRING),
        Field("controller_id", INT32, default=-1),
        Field("brokers", Array(Struct(
            Field("broker_id", INT32),
            Field("host", STRING),
            Field("port", INT32),
            Field("rack", STRING, nullable="0+", default=None),
        ))),
        Field("cluster_authorized_operations", INT32, default=-(1 << 31)),
    ),
)  # fmt: skip

# v0 is gone from Kafka 4; v5 (is_cordoned) is newer than Kafka 4.0.
DESCRIBE_LOG_DIRS = Api(
    ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", "1-4", "2+",
    request=Struct(
        # null: every partition the broker holds
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(INT32)),
        )), nullable="0+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "3+"),
        Field("results", Array(Struct(
            Field("error_code", INT16),
            Field("log_dir", STRING),
            Field("topics", Array(Struct(
                Field("name", STRING),
                Field("partitions", Array(Struct(
                    Field("partition_index", INT32),
                    Field("size_bytes", INT64),
                    # Kafka: max(high watermark - log end offset, 0) for a current log
                    Field("offset_lag", INT64),
                    Field("is_future_key", BOOL),
                    # ours (v2+): the replica's offsets and the leadership it knows of
                    Field("log_start_offset", INT64, "2+", tag=TAG_LOG_START_OFFSET,
                          tagged="2+", default=-1),
                    Field("log_end_offset", INT64, "2+", tag=TAG_LOG_END_OFFSET,
                          tagged="2+", default=-1),
                    Field("high_watermark", INT64, "2+", tag=TAG_HIGH_WATERMARK,
                          tagged="2+", default=-1),
                    Field("leader_id", INT32, "2+", tag=TAG_LEADER_ID, tagged="2+",
                          default=-1),
                    Field("leader_epoch", INT32, "2+", tag=TAG_LEADER_EPOCH, tagged="2+",
                          default=-1),
                    Field("isr", Array(INT32), "2+", tag=TAG_ISR, tagged="2+"),
                    # ours: the scrubber's first damaged offset here (-1: none found) and
                    # whether log recovery cut this replica at its last start
                    Field("damaged_from", INT64, "2+", tag=TAG_DAMAGED_FROM, tagged="2+",
                          default=-1),
                    Field("recovery_cut", BOOL, "2+", tag=TAG_RECOVERY_CUT, tagged="2+"),
                ))),
            ))),
            Field("total_bytes", INT64, "4+", default=-1),
            Field("usable_bytes", INT64, "4+", default=-1),
        ))),
    ),
)  # fmt: skip
