"""Produce and fetch side APIs: Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch, InitProducerId.

Producers append record batches; consumers and follower replicas fetch them, look up
offsets by time and check log divergence by leader epoch; idempotent producers get
their producer id and epoch.  Layouts follow Kafka's protocol at the versions served
(see docs/compatibility.md); field names are ours where the code already had them
(``topics``/``partitions``/``name`` for Kafka's ``TopicData``/``PartitionData``/``Topic``),
Kafka's in snake_case otherwise.  Fetch v13+ names topics by id (``topic_id``, a 16-byte
UUID) instead of ``name`` (KIP-516); v15+ carries the follower's id in the tagged
``replica_state`` (KIP-903) instead of ``replica_id``; v16+ answers ``node_endpoints``
(KIP-951); v17 adds the tagged ``replica_directory_id`` per partition (KIP-853).  Our one
extra: ``error_message`` (tagged, flexible versions) in the InitProducerId response.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.extras import error_message_field
from clients.protocol.schema import (
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    UUID,
    Array,
    Field,
    Struct,
)

LEADER_ID_AND_EPOCH = Struct(
    Field("leader_id", INT32, default=-1),
    Field("leader_epoch", INT32, default=-1),
    label="LeaderIdAndEpoch",
)

# KIP-630's snapshot id (Fetch's answer to a follower below the log start; FetchSnapshot)
SNAPSHOT_ID = Struct(
    Field("end_offset", INT64, default=-1),
    Field("epoch", INT32, default=-1),
    label="SnapshotId",
)

NODE_ENDPOINT = Struct(
    Field("node_id", INT32),
    Field("host", STRING),
    Field("port", INT32),
    Field("rack", STRING, nullable="0+", default=None),
    label="NodeEndpoint",
)

PRODUCE = Api(
    ApiKey.PRODUCE, "Produce", "3-12", "9+",
    request=Struct(
        Field("transactional_id", STRING, nullable="0+", default=None),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("index", INT32),
                Field("records", RECORDS, nullable="0+"),
            ))),
        ))),
    ),
    response=Struct(
        Field("responses", Array(Struct(
            Field("name", STRING),
            Field("partition_responses", Array(Struct(
                Field("index", INT32),
                Field("error_code", INT16),
                Field("base_offset", INT64),
                Field("log_append_time_ms", INT64, default=-1),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("record_errors", Array(Struct(
                    Field("batch_index", INT32),
                    Field("batch_index_error_message", STRING, nullable="0+", default=None),
                )), "8+"),
                Field("error_message", STRING, "8+", nullable="8+", default=None),
                Field("current_leader", LEADER_ID_AND_EPOCH, "10+", tag=0, tagged="10+",
                      default=None),
            ))),
        ))),
        Field("throttle_time_ms", INT32),
        Field("node_endpoints", Array(NODE_ENDPOINT), "10+", tag=0, tagged="10+"),
    ),
)  # fmt: skip

FETCH = Api(
    ApiKey.FETCH, "Fetch", "4-17", "12+",
    request=Struct(
        Field("cluster_id", STRING, "12+", nullable="12+", tag=0, tagged="12+", default=None),
        Field("replica_id", INT32, "0-14", default=-1),
        Field("replica_state", Struct(
            Field("replica_id", INT32, default=-1),
            Field("replica_epoch", INT64, default=-1),  # the follower's broker epoch
            label="ReplicaState",
        ), "15+", tag=1, tagged="15+", default=None),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, default=0x7FFFFFFF),
        Field("isolation_level", INT8),
        Field("session_id", INT32, "7+"),
        Field("session_epoch", INT32, "7+", default=-1),
        Field("topics", Array(Struct(
            Field("name", STRING, "0-12"),
            Field("topic_id", UUID, "13+"),
            Field("partitions", Array(Struct(
                Field("partition", INT32),
                Field("current_leader_epoch", INT32, "9+", default=-1),
                Field("fetch_offset", INT64),
                Field("last_fetched_epoch", INT32, "12+", default=-1),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("partition_max_bytes", INT32),
                Field("replica_directory_id", UUID, "17+", tag=0, tagged="17+"),
            ))),
        ))),
        Field("forgotten_topics_data", Array(Struct(
            Field("name", STRING, "7-12"),
            Field("topic_id", UUID, "13+"),
            Field("partitions", Array(INT32)),
        )), "7+"),
        Field("rack_id", STRING, "11+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "7+"),
        Field("session_id", INT32, "7+"),
        Field("responses", Array(Struct(
            Field("name", STRING, "0-12"),
            Field("topic_id", UUID, "13+"),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("high_watermark", INT64),
                Field("last_stable_offset", INT64, default=-1),
                Field("log_start_offset", INT64, "5+", default=-1),
                Field("diverging_epoch", Struct(
                    Field("epoch", INT32, default=-1),
                    Field("end_offset", INT64, default=-1),
                    label="EpochEndOffset",
                ), "12+", tag=0, tagged="12+", default=None),
                Field("current_leader", LEADER_ID_AND_EPOCH, "12+", tag=1, tagged="12+",
                      default=None),
                Field("snapshot_id", SNAPSHOT_ID, "12+", tag=2, tagged="12+", default=None),
                Field("aborted_transactions", Array(Struct(
                    Field("producer_id", INT64),
                    Field("first_offset", INT64),
                )), nullable="0+", default=None),
                Field("preferred_read_replica", INT32, "11+", default=-1),
                Field("records", RECORDS, nullable="0+"),
            ))),
        ))),
        Field("node_endpoints", Array(NODE_ENDPOINT), "16+", tag=0, tagged="16+"),
    ),
)  # fmt: skip

LIST_OFFSETS = Api(
    ApiKey.LIST_OFFSETS, "ListOffsets", "1-10", "6+",
    request=Struct(
        Field("replica_id", INT32, default=-1),
        Field("isolation_level", INT8, "2+"),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("current_leader_epoch", INT32, "4+", default=-1),
                # -1 latest, -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+),
                # -5 latest tiered (v9+), else the first offset whose timestamp is at or
                # after this one
                Field("timestamp", INT64),
            ))),
        ))),
        Field("timeout_ms", INT32, "10+"),  # for remote (tiered) lookups: none here
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, "2+"),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("timestamp", INT64, default=-1),
                Field("offset", INT64, default=-1),
                Field("leader_epoch", INT32, "4+", default=-1),
            ))),
        ))),
    ),
)  # fmt: skip

OFFSETS_FOR_LEADER_EPOCH = Api(
    ApiKey.OFFSETS_FOR_LEADER_EPOCH, "OffsetsForLeaderEpoch", "2-4", "4+",
    request=Struct(
        Field("replica_id", INT32, "3+", default=-2),  # -2: a consumer, -1: debug
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition", INT32),
                Field("current_leader_epoch", INT32, default=-1),
                Field("leader_epoch", INT32),
            ))),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("error_code", INT16),
                Field("partition", INT32),
                Field("leader_epoch", INT32, default=-1),
                Field("end_offset", INT64, default=-1),
            ))),
        ))),
    ),
)  # fmt: skip

INIT_PRODUCER_ID = Api(
    ApiKey.INIT_PRODUCER_ID, "InitProducerId", "0-5", "2+",
    request=Struct(
        Field("transactional_id", STRING, nullable="0+", default=None),
        Field("transaction_timeout_ms", INT32, default=-1),
        Field("producer_id", INT64, "3+", default=-1),
        Field("producer_epoch", INT16, "3+", default=-1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id", INT64, default=-1),
        Field("producer_epoch", INT16, default=-1),
        error_message_field("2+"),  # ours (tagged): why the request was refused
    ),
)  # fmt: skip
