"""Admin APIs on configs and records: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DeleteRecords.

Versions served: DescribeConfigs 1-4 (flexible 4+), AlterConfigs 0-2 (flexible 2+),
IncrementalAlterConfigs 0-1 (flexible 1+), DeleteRecords 0-2 (flexible 2+); Kafka's
layouts, field names in snake_case (``topics``/``name``/``partitions`` for DeleteRecords'
topic arrays, as elsewhere).  No tagged extras of ours.  Nullable fields default to None
(null), as in the rest of :mod:`clients.protocol.messages`.

Config resources are named by ``resource_type`` (Kafka's ConfigResource.Type: 2 topic,
4 broker, 8 broker logger, 16 client metrics, 32 group) and ``resource_name``.

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT64,
    STRING,
    Array,
    Field,
    Struct,
)

# v0 is gone from Kafka 4 (its only extra was IsDefault, replaced by config_source in v1).
DESCRIBE_CONFIGS = Api(
    ApiKey.DESCRIBE_CONFIGS, "DescribeConfigs", "1-4", "4+",
    request=Struct(
        Field("resources", Array(Struct(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configuration_keys", Array(STRING), nullable="0+"),  # null: all
        ))),
        Field("include_synonyms", BOOL, "1+"),
        Field("include_documentation", BOOL, "3+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
                Field("read_only", BOOL),
                Field("config_source", INT8, "1+", default=-1),
                Field("is_sensitive", BOOL),
                Field("synonyms", Array(Struct(
                    Field("name", STRING),
                    Field("value", STRING, nullable="0+"),
                    Field("source", INT8),
                )), "1+"),
                Field("config_type", INT8, "3+"),
                Field("documentation", STRING, "3+", nullable="3+"),
            ))),
        ))),
    ),
)  # fmt: skip

ALTER_CONFIGS = Api(
    ApiKey.ALTER_CONFIGS, "AlterConfigs", "0-2", "2+",
    request=Struct(
        Field("resources", Array(Struct(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("value", STRING, nullable="0+"),
            ))),
        ))),
        Field("validate_only", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("responses", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
        ))),
    ),
)  # fmt: skip

INCREMENTAL_ALTER_CONFIGS = Api(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", "0-1", "1+",
    request=Struct(
        Field("resources", Array(Struct(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("configs", Array(Struct(
                Field("name", STRING),
                Field("config_operation", INT8),  # 0 set, 1 delete, 2 append, 3 subtract
                Field("value", STRING, nullable="0+"),
            ))),
        ))),
        Field("validate_only", BOOL),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("responses", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
        ))),
    ),
)  # fmt: skip

DELETE_RECORDS = Api(
    ApiKey.DELETE_RECORDS, "DeleteRecords", "0-2", "2+",
    request=Struct(
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("offset", INT64),  # delete before this offset; -1: the high watermark
            ))),
        ))),
        Field("timeout_ms", INT32),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("partition_index", INT32),
                Field("low_watermark", INT64),
                Field("error_code", INT16),
            ))),
        ))),
    ),
)  # fmt: skip
