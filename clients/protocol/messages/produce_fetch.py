"""Produce and fetch side APIs.

Produce, Fetch, ListOffsets, OffsetsForLeaderEpoch and InitProducerId. Producers append
record batches (Records fields travel in the frame tail); consumers and follower
replicas fetch them, look up offsets by time and check log divergence by leader epoch;
idempotent producers get their producer id and epoch.

Field conventions and how to add a version: :mod:`clients.protocol.registry`.  Costs: the
codecs of these APIs are compiled when this module is imported (O(fields x versions), well under
a millisecond).  Thread/process safety: the declarations are immutable after import.
"""

from __future__ import annotations

from clients.protocol.api_keys import ERROR_MESSAGE as _ERR
from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.api_keys import results_of as _results
from clients.protocol.api_keys import topics_of as _topics
from clients.protocol.schema import Field, Struct
from clients.protocol.wire_types import Int8, Int16, Int32, Int64, NullableStr, Records

PRODUCE = Api(
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

FETCH = Api(
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

LIST_OFFSETS = Api(
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

INIT_PRODUCER_ID = Api(
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

OFFSETS_FOR_LEADER_EPOCH = Api(
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
