"""Controller APIs (broker -> controller): AlterPartition, BrokerRegistration,
BrokerHeartbeat, AllocateProducerIds.

Only our brokers send them and only our controller answers, so we serve the lowest
version that carries what the two exchange: v0 of each, at Kafka's layout (all four are
flexible from v0).  Kafka's later versions add what we do not use: AlterPartition v1
leader_recovery_state, v2 topic ids, v3 broker epochs in the ISR; BrokerRegistration v1
is_migrating_zk_broker, v2 log_dirs, v3 previous_broker_epoch; BrokerHeartbeat v1
offline_log_dirs.

Our extras, tagged fields with tags from 1000 up (set by the controller, read in the
broker's logs and errors): ``error_message`` (tag ``TAG_ERROR_MESSAGE``) in the
BrokerRegistration, BrokerHeartbeat and AllocateProducerIds responses and per partition
in the AlterPartition response; Kafka's responses carry only the error code.
``replica_logs`` (tag ``TAG_REPLICA_LOGS``) in the BrokerRegistration request: every log
the broker holds as it starts, with its topic id, last leader epoch, log end offset and
whether log recovery cut it (torn tail, bad batch) or left it below its checkpointed high
watermark; the controller's safe election reads it (broker/controller/state.py).
``report_replica_logs`` (tag ``TAG_REPORT_REPLICA_LOGS``) in the BrokerHeartbeat
response: the controller asks for a fresh report, which the broker sends as a
BrokerRegistration of the same incarnation.  Kafka's
v3 ``previous_broker_epoch`` says only whether the whole broker shut down cleanly.

Kafka's types where ours differed: ``incarnation_id`` is a UUID (16 bytes, a
``uuid.uuid4().bytes`` per process start), a listener's ``port`` a uint16.

Tests: kafka-python ships no schema for these APIs, so the oracle test
(tests/clients/protocol/test_kafka_oracle.py) does not cover them;
tests/clients/protocol/test_controller_messages.py round-trips each and pins the bytes
of one.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.extras import (
    TAG_REPLICA_LOGS,
    TAG_REPORT_REPLICA_LOGS,
    error_message_field,
)
from clients.protocol.schema import (
    BOOL,
    INT16,
    INT32,
    INT64,
    STRING,
    UINT16,
    UUID,
    Array,
    Field,
    Struct,
)


def _error_message() -> Field:
    """Our extra: the error's text, next to Kafka's error code."""
    return error_message_field("0+")


ALTER_PARTITION = Api(
    ApiKey.ALTER_PARTITION, "AlterPartition", "0", "0+",
    request=Struct(
        Field("broker_id", INT32),
        Field("broker_epoch", INT64, default=-1),
        Field("topics", Array(Struct(
            Field("name", STRING),  # Kafka: TopicName (v0-1)
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("leader_epoch", INT32),
                Field("new_isr", Array(INT32)),
                Field("partition_epoch", INT32),  # the epoch the leader's change expects
            ))),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("topics", Array(Struct(
            Field("name", STRING),  # Kafka: TopicName (v0-1)
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("leader_id", INT32),
                Field("leader_epoch", INT32),
                Field("isr", Array(INT32)),
                Field("partition_epoch", INT32),
                _error_message(),
            ))),
        ))),
    ),
)  # fmt: skip

BROKER_REGISTRATION = Api(
    ApiKey.BROKER_REGISTRATION, "BrokerRegistration", "0", "0+",
    request=Struct(
        Field("broker_id", INT32),
        Field("cluster_id", STRING),
        Field("incarnation_id", UUID),  # fresh per process start
        Field("listeners", Array(Struct(
            Field("name", STRING),
            Field("host", STRING),
            Field("port", UINT16),
            Field("security_protocol", INT16),  # 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL
        ))),
        Field("features", Array(Struct(
            Field("name", STRING),
            Field("min_supported_version", INT16),
            Field("max_supported_version", INT16),
        ))),
        Field("rack", STRING, nullable="0+"),
        Field("replica_logs", Array(Struct(  # our extra (module docstring)
            Field("topic_name", STRING),
            Field("topic_id", INT64, default=-1),  # from partition.metadata; -1 unknown
            Field("partition_index", INT32),
            Field("last_leader_epoch", INT32, default=-1),
            Field("log_end_offset", INT64),
            Field("recovery_cut", BOOL),
            # from partition.metadata in Kafka's form (then topic_id is -1); zero: none
            Field("topic_uuid", UUID, tag=0, tagged="0+"),
        )), "0+", tag=TAG_REPLICA_LOGS, tagged="0+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("broker_epoch", INT64, default=-1),
        _error_message(),
    ),
)  # fmt: skip

BROKER_HEARTBEAT = Api(
    ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeat", "0", "0+",
    request=Struct(
        Field("broker_id", INT32),
        Field("broker_epoch", INT64, default=-1),
        Field("current_metadata_offset", INT64),
        Field("want_fence", BOOL),
        Field("want_shut_down", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("is_caught_up", BOOL),
        Field("is_fenced", BOOL, default=True),
        Field("should_shut_down", BOOL),
        _error_message(),
        Field("report_replica_logs", BOOL, "0+", tag=TAG_REPORT_REPLICA_LOGS, tagged="0+"),
    ),
)  # fmt: skip

# A block of producer ids, unique in the cluster (KIP-730).
ALLOCATE_PRODUCER_IDS = Api(
    ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", "0", "0+",
    request=Struct(
        Field("broker_id", INT32),
        Field("broker_epoch", INT64, default=-1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id_start", INT64),
        Field("producer_id_len", INT32),
        _error_message(),
    ),
)  # fmt: skip
