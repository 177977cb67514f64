"""Cluster metadata and topic admin APIs.

Metadata, ApiVersions, CreateTopics, DeleteTopics and DescribeLogDirs: what clients ask
to find leaders, supported versions and replica state, and the topic admin requests.

Field conventions and how to add a version: :mod:`clients.protocol.registry`.  Costs: the
codecs of these APIs are compiled when this module is imported (O(fields x versions), well under
a millisecond).  Thread/process safety: the declarations are immutable after import.
"""

from __future__ import annotations

from clients.protocol.api_keys import ERROR_MESSAGE as _ERR
from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.api_keys import results_of as _results
from clients.protocol.schema import Field, Struct
from clients.protocol.wire_types import Array, Bool, Int16, Int32, Int64, Map, NullableStr, Str

METADATA = Api(
    ApiKey.METADATA, "Metadata", 0, 0,
    request=Struct(
        topics=Array(Struct(name=Str), nullable=True),  # null = all topics
        allow_auto_topic_creation=Field(Bool, default=False),
    ),
    response=Struct(
        brokers=Array(Struct(node_id=Int32, host=Str, port=Int32,
                             rack=Field(NullableStr, default=None),
                             fenced=Field(Bool, default=False))),  # set by the controller
        cluster_id=Field(NullableStr, default=None),
        controller_id=Int32,
        topics=Array(Struct(
            error_code=Int16,
            name=Str,
            is_internal=Field(Bool, default=False),
            # the topic's configs (overrides of broker defaults); Kafka has DescribeConfigs
            configs=Field(Map(Str, Str), default={}),
            partitions=Array(Struct(
                error_code=Int16,
                partition_index=Int32,
                leader_id=Int32,
                leader_epoch=Int32,
                replica_nodes=Array(Int32),
                isr_nodes=Array(Int32),
                offline_replicas=Field(Array(Int32), default=[]),
                # controller only: the leader was chosen by an unclean election
                unclean_elected=Field(Bool, default=False),
            )),
        )),
    ),
)  # fmt: skip

API_VERSIONS = Api(
    ApiKey.API_VERSIONS, "ApiVersions", 0, 0,
    request=Struct(
        client_software_name=Field(Str, default=""),
        client_software_version=Field(Str, default=""),
    ),
    response=Struct(
        error_code=Int16,
        api_keys=Array(Struct(api_key=Int16, min_version=Int16, max_version=Int16)),
    ),
)  # fmt: skip

CREATE_TOPICS = Api(
    ApiKey.CREATE_TOPICS, "CreateTopics", 0, 0,
    request=Struct(
        topics=Array(Struct(
            name=Str,
            num_partitions=Int32,  # -1 = broker default (or taken from assignments)
            replication_factor=Int16,  # -1 = broker default
            assignments=Field(
                Array(Struct(partition_index=Int32, broker_ids=Array(Int32))), default=[]
            ),
            configs=Field(Map(Str, Str), default={}),
        )),
        timeout_ms=Int32,
        validate_only=Field(Bool, default=False),
    ),
    response=Struct(topics=Array(Struct(
        name=Str,
        error_code=Int16,
        error_message=_ERR,
        num_partitions=Field(Int32, default=-1),
        replication_factor=Field(Int16, default=-1),
    ))),
)  # fmt: skip

DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS, "DeleteTopics", 0, 0,
    request=Struct(topic_names=Array(Str), timeout_ms=Int32),
    response=Struct(responses=Array(Struct(name=Str, error_code=Int16, error_message=_ERR))),
)  # fmt: skip

# Simplified DescribeLogDirs: one data dir per broker; per replica its offsets and role.
DESCRIBE_LOG_DIRS = Api(
    ApiKey.DESCRIBE_LOG_DIRS, "DescribeLogDirs", 0, 0,
    request=Struct(topics=Array(Struct(name=Str, partitions=Array(Int32)), nullable=True)),
    response=Struct(
        error_code=Int16,
        log_dir=Str,
        topics=_results(Struct(
            partition_index=Int32, error_code=Int16, log_start_offset=Int64,
            log_end_offset=Int64, high_watermark=Int64, size_bytes=Int64,
            leader_id=Int32, leader_epoch=Int32, isr=Array(Int32),
        )),
    ),
)  # fmt: skip
