"""API keys (Kafka's numbers) and :class:`Api`, one API's declaration and compiled codecs.

An :class:`Api` holds the version range we serve, the first *flexible* version (KIP-482:
compact strings and arrays, tagged fields, request header v2 / response header v1) and
the request and response :class:`~clients.protocol.schema.Struct` s.  The declarations
themselves are in :mod:`clients.protocol.messages`; the registry ``APIS`` is in
:mod:`clients.protocol.registry`.

Header versions follow Kafka: a flexible request uses request header v2 (client id as a
classic nullable string, then tagged fields), others v1; a flexible response uses
response header v1 (correlation id, tagged fields), others v0 — except ApiVersions,
whose response always uses header v0 so that a client that does not yet know the
broker's versions can read it.

Costs: codecs are compiled on first use of each (version, direction), O(fields), then
looked up in a dict.  Thread/process safety: compilation is idempotent (a race compiles
twice and keeps either result); an :class:`Api` may be shared freely.
"""

from __future__ import annotations

from enum import IntEnum

from clients.protocol.compiler import Decoder, Encoder, compile_decoder, compile_encoder
from clients.protocol.schema import Struct, Versions, versions


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
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSETS_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


def api_name(api_key: int) -> str:
    """``api_key``'s name for a log line (``API key N`` for a number we do not know)."""
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"


class Api:
    """One API: the versions served, its flexible versions and its two message bodies."""

    __slots__ = (
        "_codecs", "flexible", "key", "max_version", "min_version", "name", "request",
        "response",
    )  # fmt: skip

    def __init__(
        self,
        key: ApiKey,
        name: str,
        served: str,
        flexible: str | None,
        request: Struct,
        response: Struct,
    ) -> None:
        served_range = versions(served)
        if served_range.high is None or not 0 <= served_range.low <= served_range.high:
            raise ValueError(f"{name}: served versions must be a closed range, got {served!r}")
        self.key = key
        self.name = name
        self.min_version = served_range.low
        self.max_version = served_range.high
        self.flexible: Versions = versions(flexible)
        self.request = request
        self.response = response
        self._codecs: dict[tuple[int, bool, bool], Decoder | Encoder] = {}

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible

    def request_header_version(self, version: int) -> int:
        return 2 if version in self.flexible else 1

    def response_header_version(self, version: int) -> int:
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if version in self.flexible else 0

    def decoder(self, version: int, is_response: bool) -> Decoder:
        """The compiled decoder of one direction (caller has checked :meth:`supports`)."""
        codec = self._codecs.get((version, is_response, False))
        if codec is None:
            st = self.response if is_response else self.request
            label = f"{self.name} v{version} {'response' if is_response else 'request'}"
            codec = compile_decoder(st, version, version in self.flexible, label)
            self._codecs[(version, is_response, False)] = codec
        return codec  # type: ignore[return-value]

    def encoder(self, version: int, is_response: bool) -> Encoder:
        """The compiled encoder of one direction (caller has checked :meth:`supports`)."""
        codec = self._codecs.get((version, is_response, True))
        if codec is None:
            st = self.response if is_response else self.request
            label = f"{self.name} v{version} {'response' if is_response else 'request'}"
            codec = compile_encoder(st, version, version in self.flexible, label)
            self._codecs[(version, is_response, True)] = codec
        return codec  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Api({self.key!r}, {self.name!r}, v{self.min_version}-{self.max_version})"
