"""Security admin APIs: DescribeAcls, CreateAcls, DeleteAcls (KIP-140, prefixed patterns
KIP-290), DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Versions served: DescribeAcls, CreateAcls and DeleteAcls 1-3 (flexible 2+; v0 is gone
from Kafka 4, KIP-896); DescribeUserScramCredentials and AlterUserScramCredentials 0
(flexible 0+).  Kafka's layouts, field names in snake_case.  No tagged extras of ours.

Enumerations are Kafka's numbers: resource type (1 any, 2 topic, 3 group, 4 cluster,
5 transactional id, 6 delegation token, 7 user), pattern type (1 any, 2 match, 3 literal,
4 prefixed), operation (1 any, 2 all, 3 read, 4 write, 5 create, 6 delete, 7 alter,
8 describe, 9 cluster action, 10 describe configs, 11 alter configs, 12 idempotent
write, 13 create tokens, 14 describe tokens), permission (1 any, 2 deny, 3 allow) and
SCRAM mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).

Costs: declarations only; codecs compile on first use.  Thread/process safety: immutable.
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.schema import BYTES, INT8, INT16, INT32, STRING, Array, Field, Struct

LITERAL_PATTERN = 3  # Kafka's PatternType.LITERAL: what a v0 body means

DESCRIBE_ACLS = Api(
    ApiKey.DESCRIBE_ACLS, "DescribeAcls", "1-3", "2+",
    request=Struct(
        Field("resource_type_filter", INT8),
        Field("resource_name_filter", STRING, nullable="0+"),  # null: any name
        Field("pattern_type_filter", INT8, "1+", default=LITERAL_PATTERN),
        Field("principal_filter", STRING, nullable="0+"),
        Field("host_filter", STRING, nullable="0+"),
        Field("operation", INT8),
        Field("permission_type", INT8),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("resources", Array(Struct(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("pattern_type", INT8, "1+", default=LITERAL_PATTERN),
            Field("acls", Array(Struct(
                Field("principal", STRING),
                Field("host", STRING),
                Field("operation", INT8),
                Field("permission_type", INT8),
            ))),
        ))),
    ),
)  # fmt: skip

CREATE_ACLS = Api(
    ApiKey.CREATE_ACLS, "CreateAcls", "1-3", "2+",
    request=Struct(
        Field("creations", Array(Struct(
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            Field("resource_pattern_type", INT8, "1+", default=LITERAL_PATTERN),
            Field("principal", STRING),
            Field("host", STRING),
            Field("operation", INT8),
            Field("permission_type", INT8),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
        ))),
    ),
)  # fmt: skip

DELETE_ACLS = Api(
    ApiKey.DELETE_ACLS, "DeleteAcls", "1-3", "2+",
    request=Struct(
        Field("filters", Array(Struct(
            Field("resource_type_filter", INT8),
            Field("resource_name_filter", STRING, nullable="0+"),
            Field("pattern_type_filter", INT8, "1+", default=LITERAL_PATTERN),
            Field("principal_filter", STRING, nullable="0+"),
            Field("host_filter", STRING, nullable="0+"),
            Field("operation", INT8),
            Field("permission_type", INT8),
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("filter_results", Array(Struct(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("matching_acls", Array(Struct(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("pattern_type", INT8, "1+", default=LITERAL_PATTERN),
                Field("principal", STRING),
                Field("host", STRING),
                Field("operation", INT8),
                Field("permission_type", INT8),
            ))),
        ))),
    ),
)  # fmt: skip

DESCRIBE_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials", "0", "0+",
    request=Struct(
        Field("users", Array(Struct(  # null: every user
            Field("name", STRING),
        )), nullable="0+"),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("results", Array(Struct(
            Field("user", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("credential_infos", Array(Struct(
                Field("mechanism", INT8),
                Field("iterations", INT32),
            ))),
        ))),
    ),
)  # fmt: skip

ALTER_USER_SCRAM_CREDENTIALS = Api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials", "0", "0+",
    request=Struct(
        Field("deletions", Array(Struct(
            Field("name", STRING),
            Field("mechanism", INT8),
        ))),
        Field("upsertions", Array(Struct(
            Field("name", STRING),
            Field("mechanism", INT8),
            Field("iterations", INT32),
            Field("salt", BYTES),
            Field("salted_password", BYTES),  # Hi(password, salt, iterations), RFC 5802
        ))),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field("results", Array(Struct(
            Field("user", STRING),
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
        ))),
    ),
)  # fmt: skip
