"""Every API of the native protocol, declared once: key, versions, request and response.

API keys are Kafka's numbers.  Field names follow Kafka's JSON schemas in snake_case,
simplified: no tagged fields, no topic ids; per-partition results carry ``error_code``
(int16, see :mod:`clients.errors`) and an optional ``error_message``.  Topic names are
always ``name``.  Records fields carry record batches (Kafka RecordBatch v2 bytes) in
the frame's raw tail, see :mod:`clients.protocol`.

To add a version: bump ``max_version`` and add fields with ``Field(T, since=N,
default=...)``; older versions keep decoding with the default filled in.

Costs: all codecs are compiled at import (O(total fields x versions), well under a
millisecond).  Thread/process safety: the registry is immutable after import.
"""

from __future__ import annotations

from enum import IntEnum

from clients.schema import (
    Array,
    Bool,
    Bytes,
    Check,
    Field,
    Int8,
    Int16,
    Int32,
    Int64,
    Map,
    NullableStr,
    Records,
    Str,
    Struct,
)


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSETS_FOR_LEADER_EPOCH = 23
    ALTER_PARTITION = 56
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    DESCRIBE_LOG_DIRS = 35
    ALLOCATE_PRODUCER_IDS = 67


class Api:
    """One API: its versions and compiled request/response codecs per version."""

    __slots__ = ("_codecs", "key", "max_version", "min_version", "name", "request", "response")

    def __init__(
        self,
        key: ApiKey,
        name: str,
        min_version: int,
        max_version: int,
        request: Struct,
        response: Struct,
    ) -> None:
        if not 0 <= min_version <= max_version <= 32767:
            raise ValueError(f"{name}: bad version range {min_version}-{max_version}")
        self.key = key
        self.name = name
        self.min_version = min_version
        self.max_version = max_version
        self.request = request
        self.response = response
        # (version, is_response, encode) -> checker
        self._codecs: dict[tuple[int, bool, bool], Check] = {
            (v, is_resp, enc): (response if is_resp else request).compile(v, enc)
            for v in range(min_version, max_version + 1)
            for is_resp in (False, True)
            for enc in (False, True)
        }

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def codec(self, version: int, is_response: bool, encode: bool) -> Check:
        """The compiled checker (caller has checked :meth:`supports`)."""
        return self._codecs[(version, is_response, encode)]

    def __repr__(self) -> str:
        return f"Api({self.key!r}, {self.name!r}, v{self.min_version}-{self.max_version})"


# Shorthands for the declarations below.
_ERR = Field(NullableStr, default=None)  # optional error_message


def _topics(partition: Struct) -> Array:
    """Array of {name, partitions[...]}."""
    return Array(Struct(name=Str, partitions=Array(partition)))


def _results(partition: Struct, name: str = "partitions") -> Array:
    """Array of {name, <name>[...]} for per-partition results."""
    return Array(Struct(name=Str, **{name: Array(partition)}))


_PRODUCE = Api(
    ApiKey.PRODUCE, "Produce", 0, 0,
    request=Struct(
        transactional_id=Field(NullableStr, default=None),
        acks=Int16,
        timeout_ms=Int32,
        topics=_topics(Struct(index=Int32, records=Records)),
    ),
    response=Struct(
        responses=_results(
            Struct(
                index=Int32,
                error_code=Int16,
                error_message=_ERR,
                base_offset=Int64,
                log_append_time_ms=Field(Int64, default=-1),
                log_start_offset=Field(Int64, default=-1),
            ),
            name="partition_responses",
        ),
        throttle_time_ms=Field(Int32, default=0),
    ),
)  # fmt: skip

_FETCH = Api(
    ApiKey.FETCH, "Fetch", 0, 0,
    request=Struct(
        replica_id=Int32,
        max_wait_ms=Int32,
        min_bytes=Int32,
        max_bytes=Int32,
        isolation_level=Field(Int8, default=0),
        topics=_topics(Struct(
            partition=Int32,
            current_leader_epoch=Field(Int32, default=-1),
            fetch_offset=Int64,
            log_start_offset=Field(Int64, default=-1),
            partition_max_bytes=Int32,
        )),
    ),
    response=Struct(
        throttle_time_ms=Field(Int32, default=0),
        error_code=Field(Int16, default=0),
        responses=_results(Struct(
            partition_index=Int32,
            error_code=Int16,
            error_message=_ERR,
            high_watermark=Int64,
            last_stable_offset=Field(Int64, default=-1),
            log_start_offset=Field(Int64, default=-1),
            records=Records,
        )),
    ),
)  # fmt: skip

_LIST_OFFSETS = Api(
    ApiKey.LIST_OFFSETS, "ListOffsets", 0, 0,
    request=Struct(
        replica_id=Field(Int32, default=-1),
        isolation_level=Field(Int8, default=0),
        topics=_topics(Struct(
            partition_index=Int32,
            current_leader_epoch=Field(Int32, default=-1),
            timestamp=Int64,  # -1 latest, -2 earliest, else first offset with ts >= this
        )),
    ),
    response=Struct(
        topics=_results(Struct(
            partition_index=Int32,
            error_code=Int16,
            error_message=_ERR,
            timestamp=Int64,
            offset=Int64,
            leader_epoch=Field(Int32, default=-1),
        )),
    ),
)  # fmt: skip

_METADATA = Api(
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

_PARTITION_ERROR = Struct(partition_index=Int32, error_code=Int16, error_message=_ERR)

_OFFSET_COMMIT = Api(
    ApiKey.OFFSET_COMMIT, "OffsetCommit", 0, 0,
    request=Struct(
        group_id=Str,
        generation_id=Int32,
        member_id=Str,
        group_instance_id=Field(NullableStr, default=None),
        topics=_topics(Struct(
            partition_index=Int32,
            committed_offset=Int64,
            committed_leader_epoch=Field(Int32, default=-1),
            committed_metadata=Field(NullableStr, default=None),
        )),
    ),
    response=Struct(topics=_results(_PARTITION_ERROR)),
)  # fmt: skip

_OFFSET_FETCH = Api(
    ApiKey.OFFSET_FETCH, "OffsetFetch", 0, 0,
    request=Struct(
        group_id=Str,
        topics=Array(Struct(name=Str, partition_indexes=Array(Int32)), nullable=True),
        require_stable=Field(Bool, default=False),
    ),
    response=Struct(
        error_code=Field(Int16, default=0),
        topics=_results(Struct(
            partition_index=Int32,
            committed_offset=Int64,
            committed_leader_epoch=Field(Int32, default=-1),
            metadata=Field(NullableStr, default=None),
            error_code=Int16,
            error_message=_ERR,
        )),
    ),
)  # fmt: skip

_COORDINATOR = Struct(error_code=Int16, error_message=_ERR, node_id=Int32, host=Str, port=Int32)
_FIND_COORDINATOR = Api(
    ApiKey.FIND_COORDINATOR, "FindCoordinator", 0, 0,
    request=Struct(key=Str, key_type=Field(Int8, default=0)),  # 0 group, 1 transaction
    response=_COORDINATOR,
)  # fmt: skip

_INSTANCE = Field(NullableStr, default=None)  # group_instance_id (static membership)
_JOIN_GROUP = Api(
    ApiKey.JOIN_GROUP, "JoinGroup", 0, 0,
    request=Struct(
        group_id=Str,
        session_timeout_ms=Int32,
        rebalance_timeout_ms=Int32,
        member_id=Str,
        group_instance_id=_INSTANCE,
        protocol_type=Str,
        protocols=Array(Struct(name=Str, metadata=Bytes)),
    ),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        generation_id=Int32,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=NullableStr,
        leader=Str,
        member_id=Str,
        members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE, metadata=Bytes)),
    ),
)  # fmt: skip

_HEARTBEAT = Api(
    ApiKey.HEARTBEAT, "Heartbeat", 0, 0,
    request=Struct(group_id=Str, generation_id=Int32, member_id=Str,
                   group_instance_id=_INSTANCE),
    response=Struct(error_code=Int16, error_message=_ERR),
)  # fmt: skip

_LEAVE_GROUP = Api(
    ApiKey.LEAVE_GROUP, "LeaveGroup", 0, 0,
    request=Struct(group_id=Str,
                   members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE))),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        members=Array(Struct(member_id=Str, group_instance_id=_INSTANCE, error_code=Int16)),
    ),
)  # fmt: skip

_SYNC_GROUP = Api(
    ApiKey.SYNC_GROUP, "SyncGroup", 0, 0,
    request=Struct(
        group_id=Str,
        generation_id=Int32,
        member_id=Str,
        group_instance_id=_INSTANCE,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=Field(NullableStr, default=None),
        assignments=Array(Struct(member_id=Str, assignment=Bytes)),  # leader only
    ),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        protocol_type=Field(NullableStr, default=None),
        protocol_name=Field(NullableStr, default=None),
        assignment=Bytes,
    ),
)  # fmt: skip

_DESCRIBE_GROUPS = Api(
    ApiKey.DESCRIBE_GROUPS, "DescribeGroups", 0, 0,
    request=Struct(groups=Array(Str)),
    response=Struct(groups=Array(Struct(
        error_code=Int16,
        error_message=_ERR,
        group_id=Str,
        group_state=Str,
        protocol_type=Str,
        protocol_data=Str,
        members=Array(Struct(
            member_id=Str,
            group_instance_id=_INSTANCE,
            client_id=Str,
            client_host=Str,
            member_metadata=Bytes,
            member_assignment=Bytes,
        )),
    ))),
)  # fmt: skip

_LIST_GROUPS = Api(
    ApiKey.LIST_GROUPS, "ListGroups", 0, 0,
    request=Struct(states_filter=Field(Array(Str), default=[])),
    response=Struct(
        error_code=Int16,
        groups=Array(Struct(group_id=Str, protocol_type=Str, group_state=Str)),
    ),
)  # fmt: skip

_API_VERSIONS = Api(
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

_CREATE_TOPICS = Api(
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

_DELETE_TOPICS = Api(
    ApiKey.DELETE_TOPICS, "DeleteTopics", 0, 0,
    request=Struct(topic_names=Array(Str), timeout_ms=Int32),
    response=Struct(responses=Array(Struct(name=Str, error_code=Int16, error_message=_ERR))),
)  # fmt: skip

_INIT_PRODUCER_ID = Api(
    ApiKey.INIT_PRODUCER_ID, "InitProducerId", 0, 0,
    request=Struct(
        transactional_id=Field(NullableStr, default=None),
        transaction_timeout_ms=Field(Int32, default=-1),
        producer_id=Field(Int64, default=-1),
        producer_epoch=Field(Int16, default=-1),
    ),
    response=Struct(error_code=Int16, error_message=_ERR, producer_id=Int64,
                    producer_epoch=Int16),
)  # fmt: skip

_OFFSETS_FOR_LEADER_EPOCH = Api(
    ApiKey.OFFSETS_FOR_LEADER_EPOCH, "OffsetsForLeaderEpoch", 0, 0,
    request=Struct(
        replica_id=Field(Int32, default=-1),
        topics=_topics(Struct(
            partition=Int32, current_leader_epoch=Field(Int32, default=-1), leader_epoch=Int32,
        )),
    ),
    response=Struct(topics=_results(Struct(
        error_code=Int16, error_message=_ERR, partition=Int32, leader_epoch=Int32,
        end_offset=Int64,
    ))),
)  # fmt: skip

_ALTER_PARTITION = Api(
    ApiKey.ALTER_PARTITION, "AlterPartition", 0, 0,
    request=Struct(
        broker_id=Int32,
        broker_epoch=Int64,
        topics=_topics(Struct(
            partition_index=Int32, leader_epoch=Int32, new_isr=Array(Int32),
            partition_epoch=Int32,
        )),
    ),
    response=Struct(
        error_code=Int16,
        topics=_results(Struct(
            partition_index=Int32, error_code=Int16, error_message=_ERR, leader_id=Int32,
            leader_epoch=Int32, isr=Array(Int32), partition_epoch=Int32,
        )),
    ),
)  # fmt: skip

_BROKER_REGISTRATION = Api(
    ApiKey.BROKER_REGISTRATION, "BrokerRegistration", 0, 0,
    request=Struct(
        broker_id=Int32,
        cluster_id=Str,
        incarnation_id=Str,  # fresh per process start (Kafka: a UUID)
        listeners=Array(Struct(name=Str, host=Str, port=Int32,
                               security_protocol=Field(Int16, default=0))),
        rack=Field(NullableStr, default=None),
    ),
    response=Struct(error_code=Int16, error_message=_ERR, broker_epoch=Int64),
)  # fmt: skip

_BROKER_HEARTBEAT = Api(
    ApiKey.BROKER_HEARTBEAT, "BrokerHeartbeat", 0, 0,
    request=Struct(
        broker_id=Int32,
        broker_epoch=Int64,
        current_metadata_offset=Int64,
        want_fence=Field(Bool, default=False),
        want_shut_down=Field(Bool, default=False),
    ),
    response=Struct(
        error_code=Int16,
        error_message=_ERR,
        is_caught_up=Bool,
        is_fenced=Bool,
        should_shut_down=Bool,
    ),
)  # fmt: skip

# Broker -> controller: a block of producer ids, unique in the cluster (KIP-730).
_ALLOCATE_PRODUCER_IDS = Api(
    ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", 0, 0,
    request=Struct(broker_id=Int32, broker_epoch=Int64),
    response=Struct(error_code=Int16, error_message=_ERR, producer_id_start=Int64,
                    producer_id_len=Int32),
)  # fmt: skip

# Simplified DescribeLogDirs: one data dir per broker; per replica its offsets and role.
_DESCRIBE_LOG_DIRS = Api(
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

APIS: dict[int, Api] = {
    api.key: api
    for api in (
        _PRODUCE, _FETCH, _LIST_OFFSETS, _METADATA, _OFFSET_COMMIT, _OFFSET_FETCH,
        _FIND_COORDINATOR, _JOIN_GROUP, _HEARTBEAT, _LEAVE_GROUP, _SYNC_GROUP,
        _DESCRIBE_GROUPS, _LIST_GROUPS, _API_VERSIONS, _CREATE_TOPICS, _DELETE_TOPICS,
        _INIT_PRODUCER_ID, _OFFSETS_FOR_LEADER_EPOCH, _ALTER_PARTITION,
        _BROKER_REGISTRATION, _BROKER_HEARTBEAT, _DESCRIBE_LOG_DIRS, _ALLOCATE_PRODUCER_IDS,
    )
}  # fmt: skip
if set(APIS) != set(ApiKey):  # pragma: no cover - a declaration mistake
    raise RuntimeError(f"ApiKey without declaration: {set(ApiKey) - set(APIS)}")
