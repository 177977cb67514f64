"""API keys and the :class:`Api` declaration type of the native protocol.

:class:`ApiKey` holds Kafka's API numbers; an :class:`Api` is one API's version range
with its request and response :class:`~clients.protocol.schema.Struct`, compiled at
construction into one checker per (version, request/response, encode/decode).  The
declarations themselves are grouped by area in :mod:`clients.protocol.messages`, with
shorthands for them here; the registry ``APIS`` is in :mod:`clients.protocol.registry`.

Costs: an :class:`Api` compiles its codecs once, O(fields x versions); :meth:`Api.codec`
is a dict lookup.  Thread/process safety: an :class:`Api` is immutable after
construction and may be shared freely.
"""

from __future__ import annotations

from enum import IntEnum

from clients.protocol.schema import Field, Struct
from clients.protocol.wire_types import Array, Check, NullableStr, Str


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


# Shorthands for the declarations in the clients.api_* modules.
ERROR_MESSAGE = Field(NullableStr, default=None)  # optional error_message


def topics_of(partition: Struct) -> Array:
    """Array of {name, partitions[...]}."""
    return Array(Struct(name=Str, partitions=Array(partition)))


def results_of(partition: Struct, name: str = "partitions") -> Array:
    """Array of {name, <name>[...]} for per-partition results."""
    return Array(Struct(name=Str, **{name: Array(partition)}))
