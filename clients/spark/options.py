"""Options of the ``minikafka`` Spark data source, parsed and checked once on the driver.

Modelled on Spark's own Kafka source (names, defaults, precedence, the -2/-1 JSON
convention, its messages for refused options):

====================================  =============================================
option                                meaning
====================================  =============================================
``bootstrap.servers``                 "host:port[,host:port...]"
                                      (``kafka.bootstrap.servers`` is accepted too);
                                      required
``subscribe``                         comma list of topics: every partition of each
``subscribePattern``                  regex (full match, Python ``re``; Java's
                                      syntax for common patterns): every
                                      non-internal topic it matches, re-listed at
                                      every trigger
``assign``                            JSON ``{"topic": [0, 1]}``: exactly these
``startingOffsets``                   ``earliest`` | ``latest`` | JSON
                                      ``{"t": {"0": 23}}`` (-2 earliest, -1 latest).
                                      Default: batch ``earliest``, streaming
                                      ``latest``.  Batch refuses ``latest``/-1.
``startingTimestamp``                 ms since the epoch, every partition: the first
                                      offset with a timestamp at or after it
``startingOffsetsByTimestamp``        JSON ``{"t": {"0": 1700000000000}}``
``startingOffsetsByTimestampStrategy``  ``error`` (default: no offset at or after the
                                      timestamp fails the query) | ``latest``
``endingOffsets``                     batch only: ``latest`` (default: the high
                                      watermark at planning time) | JSON (-1 latest;
                                      -2 refused)
``endingTimestamp``,                  batch only, as the starting ones; a partition
``endingOffsetsByTimestamp``          with no offset at or after it ends at latest
``failOnDataLoss``                    ``true`` (default): a planned offset deleted
                                      (retention, DeleteRecords) fails the query;
                                      ``false``: skipped, with a warning
``includeHeaders``                    ``false`` (default): no ``headers`` column
``minPartitions``                     at least this many Spark input partitions:
                                      large offset ranges split (Spark's arithmetic)
``maxRecordsPerPartition``            split an offset range longer than this
                                      (default 1,000,000)
``maxOffsetsPerTrigger``              streaming only: records per micro-batch at
                                      most, spread over partitions by backlog
``minOffsetsPerTrigger``              streaming only: wait for this many new records
                                      before a micro-batch, at most ``maxTriggerDelay``
``maxTriggerDelay``                   streaming only: Spark time string (``15m``
                                      default; ``30s``, ``500ms``, ``1h``)
``groupIdPrefix``, ``kafka.group.id``  accepted (checked, non-empty); the source joins
                                      no group and commits nothing (it assigns
                                      partitions, as Spark's does), so no group id
                                      reaches the broker
``kafka.isolation.level``             ``read_uncommitted`` (default, as Spark's) |
                                      ``read_committed``: only committed records;
                                      "latest" is then the last stable offset
                                      (``isolation.level`` is accepted too)
``kafka.*``                           consumer settings
                                      (:mod:`clients.spark.consumer_params`; Spark's
                                      refused keys refused with Spark's messages)
``requestTimeoutMs``                  client request timeout (default 30,000)
``readTimeoutMs``                     a reader with no progress towards its range end
                                      for this long fails (default 120,000)
``maxPartitionFetchBytes``            bytes per partition per fetch (default 1 MiB)
====================================  =============================================

Exactly one of ``subscribe`` / ``subscribePattern`` / ``assign``.  Precedence (Spark's):
``startingTimestamp`` over ``startingOffsetsByTimestamp`` over ``startingOffsets``, the
same for the ending ones.  Option names are case-insensitive (Spark passes them so); an
unknown option is an error, not silently ignored, so a typo such as ``startingOffset``
fails loudly.  A JSON offsets or timestamps option must name every partition read (as
Spark's Kafka source requires) and only those.  Every failure raises
:class:`clients.protocol.errors.InvalidConfigError` naming the option and the bad value.

Costs: O(size of the option strings).  Pure functions and frozen values: thread-safe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.spark.consumer_params import consumer_settings

__all__ = [
    "EARLIEST",
    "LATEST",
    "SourceOptions",
    "parse_offsets_json",
    "parse_source_options",
    "parse_time_ms",
    "wants_headers",
]

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000

# lower-cased name -> canonical name (kafka.* consumer settings are checked apart)
_KNOWN = {name.lower(): name for name in (
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign",
    "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "endingOffsets", "endingTimestamp",
    "endingOffsetsByTimestamp", "failOnDataLoss", "includeHeaders", "minPartitions",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupIdPrefix",
    "kafka.group.id", "maxRecordsPerPartition", "requestTimeoutMs", "readTimeoutMs",
    "maxPartitionFetchBytes", "kafka.isolation.level", "isolation.level",
)}  # fmt: skip
_STREAMING_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")

# An offsets spec: "earliest" / "latest" as -2 / -1, or per-partition offsets (-2/-1 allowed).
OffsetSpec = int | dict[TopicPartition, int]
# A timestamps spec (ms): one for every partition, or per partition.
TimestampSpec = int | dict[TopicPartition, int]


@dataclass(frozen=True)
class SourceOptions:
    """Checked options (see the module docstring).  Exactly one of ``subscribe`` /
    ``subscribe_pattern`` / ``assign`` is set.  A timestamps spec, when given, takes
    precedence over the offsets spec of the same end (Spark's rule)."""

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
    subscribe_pattern: str | None = None
    starting_timestamps: TimestampSpec | None = None
    ending_timestamps: TimestampSpec | None = None
    fail_on_no_matching_start: bool = True  # startingOffsetsByTimestampStrategy=error
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    group_id: str | None = None  # kafka.group.id (accepted; no group is used)
    group_id_prefix: str = "spark-kafka-source"
    # kafka.* passthrough (not in the repr: it may hold a password)
    kafka_settings: tuple[tuple[str, Any], ...] = field(default=(), repr=False)

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics named by ``subscribe`` or ``assign`` (none for a pattern)."""
        if self.subscribe:
            return self.subscribe
        return tuple(dict.fromkeys(tp.topic for tp in self.assign))

    def consumer_kwargs(self, **defaults: Any) -> dict[str, Any]:
        """Keyword arguments for a Consumer: ``defaults`` overridden by ``kafka.*``."""
        return {**defaults, **dict(self.kafka_settings)}


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check ``options`` (as Spark hands them to the data source) for a batch or a
    streaming read; raises :class:`InvalidConfigError` with a precise message."""
    given: dict[str, str] = {}
    passthrough: dict[str, str] = {}
    for key, value in options.items():
        canonical = _KNOWN.get(key.lower())
        if canonical is None and key.lower().startswith("kafka."):
            passthrough[key.lower()] = value
            continue
        if canonical is None:
            raise InvalidConfigError(
                f"unknown minikafka option {key!r}; known: {sorted(set(_KNOWN.values()))} "
                "and kafka.* consumer settings"
            )
        given[canonical] = value
    bootstrap = given.get("bootstrap.servers") or given.get("kafka.bootstrap.servers")
    if not bootstrap or not bootstrap.strip():
        raise InvalidConfigError("option 'bootstrap.servers' is required (host:port[,...])")
    subscribe, pattern, assign = _subscription(given)
    for name in _BATCH_ONLY if streaming else _STREAMING_ONLY:
        if name in given:
            kind = "batch" if streaming else "streaming"
            raise InvalidConfigError(f"option {name!r} applies to {kind} reads only")
    starting_ts = _timestamp_spec(given, "startingTimestamp", "startingOffsetsByTimestamp")
    ending_ts = _timestamp_spec(given, "endingTimestamp", "endingOffsetsByTimestamp")
    starting = _offset_spec(given, "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(given, "endingOffsets", "latest")
    if not streaming and starting_ts is None and _mentions(starting, LATEST):
        raise InvalidConfigError(
            "startingOffsets 'latest' (or -1) is not allowed for batch reads (as in Spark)"
        )
    if _mentions(ending, EARLIEST):
        raise InvalidConfigError("endingOffsets 'earliest' (or -2) is not allowed (as in Spark)")
    read = set(assign) if assign else None
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending),
                       ("startingOffsetsByTimestamp", starting_ts),
                       ("endingOffsetsByTimestamp", ending_ts)):  # fmt: skip
        if isinstance(spec, dict) and pattern is None:
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
        subscribe_pattern=pattern,
        starting_timestamps=starting_ts,
        ending_timestamps=ending_ts,
        fail_on_no_matching_start=_strategy(given),
        fail_on_data_loss=_bool_option(given, "failOnDataLoss", True),
        include_headers=_bool_option(given, "includeHeaders", False),
        min_partitions=_int_option(given, "minPartitions", None, 1),
        min_offsets_per_trigger=_int_option(given, "minOffsetsPerTrigger", None, 1),
        max_trigger_delay_ms=parse_time_ms(
            given.get("maxTriggerDelay", "15m"), "maxTriggerDelay"),
        group_id=_non_empty(given, "kafka.group.id"),
        group_id_prefix=_non_empty(given, "groupIdPrefix") or "spark-kafka-source",
        kafka_settings=consumer_settings(passthrough),
    )


def wants_headers(options: Mapping[str, str]) -> bool:
    """``includeHeaders`` alone (the schema is asked for before the reader is built)."""
    given = {_KNOWN.get(k.lower(), k): v for k, v in options.items()}
    return _bool_option(given, "includeHeaders", False)


def _strategy(given: dict[str, str]) -> bool:
    raw = given.get("startingOffsetsByTimestampStrategy", "error")
    value = raw.strip().lower()
    if value not in ("error", "latest"):
        raise InvalidConfigError(
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {raw!r}"
        )
    return value == "error"


def _bool_option(given: dict[str, str], name: str, default: bool) -> bool:
    raw = given.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"option {name!r} must be 'true' or 'false', got {raw!r}")
    return value == "true"


def _non_empty(given: dict[str, str], name: str) -> str | None:
    raw = given.get(name)
    if raw is None:
        return None
    if not raw.strip():
        raise InvalidConfigError(f"option {name!r} must not be empty")
    return raw.strip()


_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}  # fmt: skip
_TIME = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def parse_time_ms(raw: str, name: str) -> int:
    """A Spark time string (``15m``, ``30s``, ``500ms``, ``1h``; no unit: ms) in ms."""
    m = _TIME.match(raw.lower())
    if m is None or m.group(2) not in ("", *_TIME_UNITS_MS):
        raise InvalidConfigError(
            f"option {name!r} must be a time such as '15m', '30s' or '500ms', got {raw!r}"
        )
    return int(int(m.group(1)) * _TIME_UNITS_MS.get(m.group(2) or "ms", 1))


def _timestamp_spec(given: dict[str, str], single: str, by_partition: str
                    ) -> TimestampSpec | None:
    """``startingTimestamp`` (every partition) wins over ``startingOffsetsByTimestamp``."""
    if single in given:
        raw = given[single].strip()
        if not raw.isdigit():
            raise InvalidConfigError(
                f"option {single!r} must be a timestamp in ms since the epoch (>= 0), "
                f"got {given[single]!r}"
            )
        return int(raw)
    if by_partition not in given:
        return None
    spec = parse_offsets_json(given[by_partition], by_partition)
    bad = [f"{tp.topic}-{tp.partition}: {ts}" for tp, ts in spec.items() if ts < 0]
    if bad:
        raise InvalidConfigError(
            f"option {by_partition!r}: timestamps must be >= 0 (ms), got " + ", ".join(bad)
        )
    return spec


def _isolation_level(given: dict[str, str]) -> str:
    raw = given.get("kafka.isolation.level") or given.get("isolation.level") or "read_uncommitted"
    level = raw.strip().lower()
    if level not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigError(
            f"option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got {raw!r}"
        )
    return level


def _subscription(given: dict[str, str]
                  ) -> tuple[tuple[str, ...], str | None, tuple[TopicPartition, ...]]:
    """(subscribe, subscribePattern, assign): exactly one of them set."""
    strategies = [n for n in ("subscribe", "subscribePattern", "assign") if n in given]
    if len(strategies) != 1:
        raise InvalidConfigError(
            "give exactly one of the options 'subscribe', 'subscribePattern' and 'assign'"
            + (f" (got {strategies})" if strategies else "")
        )
    if "subscribe" in given:
        topics = tuple(t.strip() for t in given["subscribe"].split(","))
        if not topics or any(not t for t in topics):
            raise InvalidConfigError(
                f"option 'subscribe' must be a comma list of topic names, "
                f"got {given['subscribe']!r}"
            )
        return tuple(dict.fromkeys(topics)), None, ()
    if "subscribePattern" in given:
        pattern = given["subscribePattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidConfigError(
                f"option 'subscribePattern' is not a valid regex ({e}): {pattern!r}"
            ) from None
        if not pattern:
            raise InvalidConfigError("option 'subscribePattern' must not be empty")
        return (), pattern, ()
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
    return (), None, tuple(dict.fromkeys(out))


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
