"""Every API of the native protocol, declared once: key, versions, request and response.

API keys are Kafka's numbers.  Field names follow Kafka's JSON schemas in snake_case,
simplified: no tagged fields, no topic ids; per-partition results carry ``error_code``
(int16, see :mod:`clients.protocol.errors`) and an optional ``error_message``.  Topic
names are always ``name``.  Records fields carry record batches (Kafka RecordBatch v2
bytes) in the frame's raw tail, see :mod:`clients.protocol.codec`.

To add a version: bump ``max_version`` and add fields with ``Field(T, since=N,
default=...)``; older versions keep decoding with the default filled in.

Costs: all codecs are compiled at import (O(total fields x versions), well under a
millisecond).  Thread/process safety: the registry is immutable after import.

Modules: :mod:`clients.protocol.api_keys` (:class:`ApiKey`, :class:`Api`, declaration
shorthands) and the declarations by area in :mod:`clients.protocol.messages`; this module
is the registry ``APIS`` (API key -> Api).
"""

from __future__ import annotations

from clients.protocol.api_keys import Api, ApiKey
from clients.protocol.messages.controller import (
    ALLOCATE_PRODUCER_IDS,
    ALTER_PARTITION,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
)
from clients.protocol.messages.groups import (
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from clients.protocol.messages.metadata import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_LOG_DIRS,
    METADATA,
)
from clients.protocol.messages.produce_fetch import (
    FETCH,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    OFFSETS_FOR_LEADER_EPOCH,
    PRODUCE,
)

__all__ = ["APIS"]

APIS: dict[int, Api] = {
    api.key: api
    for api in (
        PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH,
        FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
        DESCRIBE_GROUPS, LIST_GROUPS, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS,
        INIT_PRODUCER_ID, OFFSETS_FOR_LEADER_EPOCH, ALTER_PARTITION,
        BROKER_REGISTRATION, BROKER_HEARTBEAT, DESCRIBE_LOG_DIRS, ALLOCATE_PRODUCER_IDS,
    )
}  # fmt: skip
if set(APIS) != set(ApiKey):  # pragma: no cover - a declaration mistake
    raise RuntimeError(f"ApiKey without declaration: {set(ApiKey) - set(APIS)}")
