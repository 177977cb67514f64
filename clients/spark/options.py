"""Options of the ``minikafka`` Spark data source, parsed and checked once on the driver.

Modelled on Spark's own Kafka source (names, defaults, the -2/-1 JSON convention):

===========================  =====================================================
option                       meaning
===========================  =====================================================
``bootstrap.servers``        "host:port[,host:port...]" (``kafka.bootstrap.servers``
                             is accepted too); required
``subscribe``                comma list of topics: every partition of each
``assign``                   JSON ``{"topic": [0, 1]}``: exactly these partitions
``startingOffsets``          ``earliest`` | ``latest`` | JSON ``{"t": {"0": 23}}``
                             (-2 earliest, -1 latest). Default: batch ``earliest``,
                             streaming ``latest``. Batch refuses ``latest``/-1.
``endingOffsets``            batch only: ``latest`` (default: the high watermark at
                             planning time) | JSON (-1 latest; -2 refused)
``maxOffsetsPerTrigger``     streaming only: records per micro-batch at most,
                             spread over partitions in proportion to their backlog
``maxRecordsPerPartition``   split an offset range longer than this into several
                             Spark input partitions (default 1,000,000)
``requestTimeoutMs``         client request timeout (default 30,000)
``readTimeoutMs``            a reader that sees no progress towards its range end
                             for this long fails (default 120,000)
``maxPartitionFetchBytes``   bytes per partition per fetch (default 1 MiB)
``kafka.isolation.level``    ``read_uncommitted`` (default, as Spark's) |
                             ``read_committed``: only committed transactional
                             records; "latest" is then the last stable offset
                             (``isolation.level`` is accepted too)
===========================  =====================================================

Exactly one of ``subscribe`` / ``assign``.  Option names are case-insensitive (Spark
passes them so); an unknown option is an error, not silently ignored, so a typo such as
``startingOffset`` fails loudly.  A JSON offsets option must name every partition read
(as Spark's Kafka source requires) and only those.  Every failure raises
:class:`clients.protocol.errors.InvalidConfigError` naming the option and the bad value.

Costs: O(size of the option strings).  Pure functions and frozen values: thread-safe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "SourceOptions",
    "parse_offsets_json",
    "parse_source_options",
]

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000

# lower-cased name -> canonical name
_KNOWN = {name.lower(): name for name in (
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "assign", "startingOffsets",
    "endingOffsets", "maxOffsetsPerTrigger", "maxRecordsPerPartition", "requestTimeoutMs",
    "readTimeoutMs", "maxPartitionFetchBytes", "kafka.isolation.level", "isolation.level",
)}  # fmt: skip

# An offsets spec: "earliest" / "latest" as -2 / -1, or per-partition offsets (-2/-1 allowed).
OffsetSpec = int | dict[TopicPartition, int]


@dataclass(frozen=True)
class SourceOptions:
    """Checked options (see the module docstring).  Exactly one of ``subscribe`` /
    ``assign`` is non-empty."""

    bootstrap_servers: str
    subscribe: tuple[str, ...]
    assign: tuple[TopicPartition, ...]
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    max_offsets_per_trigger: int | None
    max_records_per_partition: int
    request_timeout_ms: int
    read_timeout_ms: int
    max_partition_fetch_bytes: int
    isolation_level: str = "read_uncommitted"

    @property
    def topics(self) -> tuple[str, ...]:
        if self.subscribe:
            return self.subscribe
        return tuple(dict.fromkeys(tp.topic for tp in self.assign))


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check ``options`` (as Spark hands them to the data source) for a batch or a
    streaming read; raises :class:`InvalidConfigError` with a precise message."""
    given: dict[str, str] = {}
    for key, value in options.items():
        canonical = _KNOWN.get(key.lower())
        if canonical is None:
            raise InvalidConfigError(
                f"unknown minikafka option {key!r}; known: {sorted(set(_KNOWN.values()))}"
            )
        given[canonical] = value
    bootstrap = given.get("bootstrap.servers") or given.get("kafka.bootstrap.servers")
    if not bootstrap or not bootstrap.strip():
        raise InvalidConfigError("option 'bootstrap.servers' is required (host:port[,...])")
    subscribe, assign = _subscription(given)
    if streaming and "endingOffsets" in given:
        raise InvalidConfigError("option 'endingOffsets' applies to batch reads only")
    if not streaming and "maxOffsetsPerTrigger" in given:
        raise InvalidConfigError("option 'maxOffsetsPerTrigger' applies to streaming reads only")
    starting = _offset_spec(given, "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(given, "endingOffsets", "latest")
    if not streaming and _mentions(starting, LATEST):
        raise InvalidConfigError(
            "startingOffsets 'latest' (or -1) is not allowed for batch reads (as in Spark)"
        )
    if _mentions(ending, EARLIEST):
        raise InvalidConfigError("endingOffsets 'earliest' (or -2) is not allowed (as in Spark)")
    read = set(assign) if assign else None
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict):
            _check_spec_partitions(name, spec, subscribe, read)
    max_per_trigger = _int_option(given, "maxOffsetsPerTrigger", None, 1)
    return SourceOptions(
        bootstrap_servers=bootstrap.strip(),
        subscribe=subscribe,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=max_per_trigger,
        max_records_per_partition=_req_int(
            given, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, 1),
        request_timeout_ms=_req_int(given, "requestTimeoutMs", 30_000, 1),
        read_timeout_ms=_req_int(given, "readTimeoutMs", 120_000, 1),
        max_partition_fetch_bytes=_req_int(given, "maxPartitionFetchBytes", 1 << 20, 1024),
        isolation_level=_isolation_level(given),
    )


def _isolation_level(given: dict[str, str]) -> str:
    raw = given.get("kafka.isolation.level") or given.get("isolation.level") or "read_uncommitted"
    level = raw.strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(
            f"option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got {raw!r}"
        )
    return level


def _subscription(given: dict[str, str]) -> tuple[tuple[str, ...], tuple[TopicPartition, ...]]:
    if ("subscribe" in given) == ("assign" in given):
        raise InvalidConfigError("give exactly one of the options 'subscribe' and 'assign'")
    if "subscribe" in given:
        topics = tuple(t.strip() for t in given["subscribe"].split(","))
        if not topics or any(not t for t in topics):
            raise InvalidConfigError(
                f"option 'subscribe' must be a comma list of topic names, "
                f"got {given['subscribe']!r}"
            )
        return tuple(dict.fromkeys(topics)), ()
    raw = _json(given["assign"], "assign")
    if not isinstance(raw, dict) or not raw:
        raise InvalidConfigError(
            f'option \'assign\' must be a JSON object {{"topic": [0, 1]}}, got {given["assign"]!r}'
        )
    out: list[TopicPartition] = []
    for topic, parts in raw.items():
        if not topic or not isinstance(parts, list) or not parts or not all(
            type(p) is int and p >= 0 for p in parts
        ):
            raise InvalidConfigError(
                f"option 'assign': topic {topic!r} needs a non-empty list of partition "
                f"numbers >= 0, got {parts!r}"
            )
        out.extend(TopicPartition(topic, p) for p in parts)
    return (), tuple(dict.fromkeys(out))


def _offset_spec(given: dict[str, str], name: str, default: str) -> OffsetSpec:
    raw = given.get(name, default).strip()
    if raw.lower() == "earliest":
        return EARLIEST
    if raw.lower() == "latest":
        return LATEST
    if not raw.startswith("{"):
        raise InvalidConfigError(
            f"option {name!r} must be 'earliest', 'latest' or a JSON object, got {raw!r}"
        )
    return parse_offsets_json(raw, name)


def parse_offsets_json(raw: str, name: str = "offsets") -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23, "1": -2}}`` -> {TopicPartition: offset}; offsets >= -2."""
    value = _json(raw, name)
    if not isinstance(value, dict) or not value:
        raise InvalidConfigError(f'option {name!r} must be a JSON object {{"topic": {{"0": 23}}}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict) or not parts:
            raise InvalidConfigError(
                f"option {name!r}: topic {topic!r} needs an object of partition -> offset, "
                f"got {parts!r}"
            )
        for part, offset in parts.items():
            if not (isinstance(part, str) and part.isdigit()):
                raise InvalidConfigError(
                    f"option {name!r}: partition {part!r} of {topic!r} is not a number >= 0"
                )
            if type(offset) is not int or offset < EARLIEST:
                raise InvalidConfigError(
                    f"option {name!r}: offset {offset!r} of {topic}-{part} must be an int "
                    ">= 0, or -2 (earliest) or -1 (latest)"
                )
            out[TopicPartition(topic, int(part))] = offset
    return out


def _check_spec_partitions(
    name: str, spec: dict[TopicPartition, int], subscribe: tuple[str, ...],
    assign: set[TopicPartition] | None,
) -> None:
    """With ``assign`` the JSON names exactly those partitions; with ``subscribe`` only
    subscribed topics (that it covers every partition is checked against metadata)."""
    if assign is not None:
        extra = sorted(set(spec) - assign)
        missing = sorted(assign - set(spec))
        if extra or missing:
            raise InvalidConfigError(
                f"option {name!r} must name exactly the assigned partitions; "
                f"not assigned: {_names(extra)}; missing: {_names(missing)}"
            )
        return
    foreign = sorted({tp.topic for tp in spec} - set(subscribe))
    if foreign:
        raise InvalidConfigError(f"option {name!r} names topics not subscribed: {foreign}")


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps) or "none"


def _mentions(spec: OffsetSpec, which: int) -> bool:
    return spec == which if isinstance(spec, int) else which in spec.values()


def _json(raw: str, name: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidConfigError(f"option {name!r} is not valid JSON ({e}): {raw!r}") from None


def _int_option(given: dict[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = given.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < low:
        raise InvalidConfigError(f"option {name!r} must be >= {low}, got {value}")
    return value


def _req_int(given: dict[str, str], name: str, default: int, low: int) -> int:
    value = _int_option(given, name, default, low)
    assert value is not None
    return value
