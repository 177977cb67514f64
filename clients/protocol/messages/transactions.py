"""Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, WriteTxnMarkers,
TxnOffsetCommit, DescribeProducers, DescribeTransactions, ListTransactions.

A transactional producer finds its transaction coordinator (FindCoordinator key type 1),
gets its producer id and epoch (InitProducerId with a ``transactional_id``), names each
partition before its first write to it (AddPartitionsToTxn) and each consumer group whose
offsets it commits (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator), and
ends the transaction (EndTxn).  The coordinator then writes COMMIT or ABORT markers on
every partition of the transaction (WriteTxnMarkers, broker to broker).  The admin APIs
describe producers on a partition and the coordinator's transactions.

Layouts follow Kafka's JSON message specs at the versions declared, names in snake_case
(``v3_and_below_*`` are Kafka's own names for the client form of AddPartitionsToTxn;
v4+ carries a list of transactions with ``verify_only``, sent between brokers for
KIP-890's verification).  Which versions a broker advertises is decided by its handler
table, not here.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import BOOL, INT8, INT16, INT32, INT64, STRING, Array, Field, Struct

ADD_PARTITIONS_TOPIC = Struct(
    Field("name", STRING),
    Field("partitions", Array(INT32)),
    label="AddPartitionsToTxnTopic",
)

ADD_PARTITIONS_TOPIC_RESULT = Struct(
    Field("name", STRING),
    Field("results_by_partition", Array(Struct(
        Field("partition_index", INT32),
        Field("partition_error_code", INT16),
        label="AddPartitionsToTxnPartitionResult",
    ))),
    label="AddPartitionsToTxnTopicResult",
)  # fmt: skip

ADD_PARTITIONS_TO_TXN = Api(
    ApiKey.ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxn", "0-5", "3+",
    request=Struct(
        Field("transactions", Array(Struct(
            Field("transactional_id", STRING),
            Field("producer_id", INT64),
            Field("producer_epoch", INT16),
            Field("verify_only", BOOL, default=False),
            Field("topics", Array(ADD_PARTITIONS_TOPIC)),
            label="AddPartitionsToTxnTransaction",
        )), "4+"),
        Field("v3_and_below_transactional_id", STRING, "0-3"),
        Field("v3_and_below_producer_id", INT64, "0-3"),
        Field("v3_and_below_producer_epoch", INT16, "0-3"),
        Field("v3_and_below_topics", Array(ADD_PARTITIONS_TOPIC), "0-3"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "4+", default=0),
        Field("results_by_transaction", Array(Struct(
            Field("transactional_id", STRING),
            Field("topic_results", Array(ADD_PARTITIONS_TOPIC_RESULT)),
            label="AddPartitionsToTxnResult",
        )), "4+"),
        Field("results_by_topic_v3_and_below", Array(ADD_PARTITIONS_TOPIC_RESULT), "0-3"),
    ),
)  # fmt: skip

ADD_OFFSETS_TO_TXN = Api(
    ApiKey.ADD_OFFSETS_TO_TXN, "AddOffsetsToTxn", "0-4", "3+",
    request=Struct(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("group_id", STRING),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
    ),
)  # fmt: skip

END_TXN = Api(
    ApiKey.END_TXN, "EndTxn", "0-5", "3+",
    request=Struct(
        Field("transactional_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("committed", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id", INT64, "5+", default=-1),
        Field("producer_epoch", INT16, "5+", default=-1),
    ),
)  # fmt: skip

WRITE_TXN_MARKERS = Api(
    ApiKey.WRITE_TXN_MARKERS, "WriteTxnMarkers", "1-2", "1+",
    request=Struct(
        Field("markers", Array(Struct(
            Field("producer_id", INT64),
            Field("producer_epoch", INT16),
            Field("transaction_result", BOOL),
            Field("topics", Array(Struct(
                Field("name", STRING),
                Field("partition_indexes", Array(INT32)),
                label="WritableTxnMarkerTopic",
            ))),
            Field("coordinator_epoch", INT32),
            Field("transaction_version", INT8, "2+", default=0),
            label="WritableTxnMarker",
        ))),
    ),
    response=Struct(
        Field("markers", Array(Struct(
            Field("producer_id", INT64),
            Field("topics", Array(Struct(
                Field("name", STRING),
                Field("partitions", Array(Struct(
                    Field("partition_index", INT32),
                    Field("error_code", INT16),
                    label="WritableTxnMarkerPartitionResult",
                ))),
                label="WritableTxnMarkerTopicResult",
            ))),
            label="WritableTxnMarkerResult",
        ))),
    ),
)  # fmt: skip

TXN_OFFSET_COMMIT = Api(
    ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", "0-4", "3+",
    request=Struct(
        Field("transactional_id", STRING),
        Field("group_id", STRING),
        Field("producer_id", INT64),
        Field("producer_epoch", INT16),
        Field("generation_id", INT32, "3+", default=-1),
        Field("member_id", STRING, "3+", default=""),
        Field("group_instance_id", STRING, "3+", nullable="3+", default=None),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("committed_offset", INT64),
                Field("committed_leader_epoch", INT32, "2+", default=-1),
                Field("committed_metadata", STRING, nullable="0+", default=None),
                label="TxnOffsetCommitRequestPartition",
            ))),
            label="TxnOffsetCommitRequestTopic",
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                label="TxnOffsetCommitResponsePartition",
            ))),
            label="TxnOffsetCommitResponseTopic",
        ))),
    ),
)  # fmt: skip

DESCRIBE_PRODUCERS = Api(
    ApiKey.DESCRIBE_PRODUCERS, "DescribeProducers", "0", "0+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partition_indexes", Array(INT32)),
            label="TopicRequest",
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+", default=None),
                Field("active_producers", Array(Struct(
                    Field("producer_id", INT64),
                    Field("producer_epoch", INT32),
                    Field("last_sequence", INT32, default=-1),
                    Field("last_timestamp", INT64, default=-1),
                    Field("coordinator_epoch", INT32),
                    Field("current_txn_start_offset", INT64, default=-1),
                    label="ProducerState",
                ))),
                label="PartitionResponse",
            ))),
            label="TopicResponse",
        ))),
    ),
)  # fmt: skip

DESCRIBE_TRANSACTIONS = Api(
    ApiKey.DESCRIBE_TRANSACTIONS, "DescribeTransactions", "0", "0+",
    request=Struct(
        Field("transactional_ids", Array(STRING)),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("transaction_states", Array(Struct(
            Field("error_code", INT16),
            Field("transactional_id", STRING),
            Field("transaction_state", STRING),
            Field("transaction_timeout_ms", INT32),
            Field("transaction_start_time_ms", INT64),
            Field("producer_id", INT64),
            Field("producer_epoch", INT16),
            Field("topics", Array(Struct(
                Field("topic", STRING),
                Field("partitions", Array(INT32)),
                label="TopicData",
            ))),
            label="TransactionState",
        ))),
    ),
)  # fmt: skip

LIST_TRANSACTIONS = Api(
    ApiKey.LIST_TRANSACTIONS, "ListTransactions", "0-1", "0+",
    request=Struct(
        Field("state_filters", Array(STRING)),
        Field("producer_id_filters", Array(INT64)),
        Field("duration_filter", INT64, "1+", default=-1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("unknown_state_filters", Array(STRING)),
        Field("transaction_states", Array(Struct(
            Field("transactional_id", STRING),
            Field("producer_id", INT64),
            Field("transaction_state", STRING),
            label="TransactionState",
        ))),
    ),
)  # fmt: skip
