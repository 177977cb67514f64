"""Controller-internal APIs (broker -> controller): ISR changes, registration, liveness, ids.

AlterPartition, BrokerRegistration, BrokerHeartbeat and AllocateProducerIds; only brokers
send them, the controller answers.

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
from clients.protocol.wire_types import Array, Bool, Int16, Int32, Int64, NullableStr, Str

ALTER_PARTITION = Api(
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

BROKER_REGISTRATION = Api(
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

BROKER_HEARTBEAT = Api(
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
ALLOCATE_PRODUCER_IDS = Api(
    ApiKey.ALLOCATE_PRODUCER_IDS, "AllocateProducerIds", 0, 0,
    request=Struct(broker_id=Int32, broker_epoch=Int64),
    response=Struct(error_code=Int16, error_message=_ERR, producer_id_start=Int64,
                    producer_id_len=Int32),
)  # fmt: skip
