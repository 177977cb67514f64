"""Per-log (per-topic) storage configuration: :class:`LogConfig`.

Every field has a Kafka topic-config twin; :meth:`LogConfig.from_dict` accepts both our
names (``segment_bytes``) and Kafka's dotted names (``segment.bytes``), with values as
ints or decimal strings (as they arrive from a properties file or an admin request).

=====================  ===================  =============  =================================
field                  Kafka name           default        meaning / bound
=====================  ===================  =============  =================================
segment_bytes          segment.bytes        64 MiB         roll when the active segment would
                                                           exceed it; [1024, 2**31 - 1]
segment_ms             segment.ms           7 days         roll when the active segment's
                                                           first append is older; >= 1
segment_index_bytes    segment.index.bytes  10 MiB         preallocated .index/.timeindex
                                                           size; [96, 2**31 - 1]
index_interval_bytes   index.interval.bytes 4096           bytes of log between index
                                                           entries; >= 1
retention_ms           retention.ms         7 days         delete segments older; -1 = never
retention_bytes        retention.bytes      -1             keep at most this many bytes; -1
flush_messages         flush.messages       None           fsync after N messages; None =
                                                           rely on replication; >= 1
flush_ms               flush.ms             None           fsync when the oldest unflushed
                                                           append is older; None; >= 0
max_message_bytes      max.message.bytes    1 MiB + 12     largest batch accepted; >= 61
cleanup_policy         cleanup.policy       "delete"       "delete" | "compact" |
                                                           "compact,delete" (both; given in
                                                           either order, stored so)
delete_retention_ms    delete.retention.ms  24 h           compacted topics: a tombstone is
                                                           kept this long after the cleaner
                                                           first processed it; >= 0
min_cleanable_dirty_   min.cleanable.dirty. 0.5            compacted topics: clean a log when
ratio                  ratio                               dirty / cleanable bytes reaches
                                                           this; a float in [0, 1]
min_compaction_lag_ms  min.compaction.lag.  0              compacted topics: a segment whose
                       ms                                  newest record is younger is not
                                                           cleaned yet; >= 0
message_timestamp_     message.timestamp.   2**63 - 1      a record whose CreateTime is more
before_max_ms          before.max.ms                       than this before the leader's
                                                           clock is INVALID_TIMESTAMP; >= 0
message_timestamp_     message.timestamp.   1 hour         the same for records from the
after_max_ms           after.max.ms                        future (Kafka 4's defaults)
message_timestamp_     message.timestamp.   "CreateTime"   "LogAppendTime": the leader stamps
type                   type                                each batch with its clock (the
                                                           window above does not apply)
=====================  ===================  =============  =================================

The policy is a set, as in Kafka: :attr:`LogConfig.compact` ("compact" in it) makes
:mod:`storage.cleaner` keep the latest record per key; :attr:`LogConfig.delete` ("delete"
in it) makes time and size retention (:mod:`storage.log.segment_policy`) delete old
segments.  ``"compact"`` alone is exempt from retention (Kafka's rule for a compact-only
topic); ``"compact,delete"`` gets both, compaction of the dirty section and retention of
whole old segments.  The field holds the normalized list (:func:`normalize_cleanup_policy`).

An out-of-range value or an unknown key raises :class:`~clients.protocol.errors.InvalidConfigError`
whose message names the key.  Immutable (frozen dataclass): safe to share between threads
and to send to other processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from clients.protocol.errors import InvalidConfigError

INT32_MAX = 2**31 - 1
MIN_SEGMENT_BYTES = 1024
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
MIN_SEGMENT_INDEX_BYTES = 96  # 12 offset-index entries / 8 time-index entries
MIN_MESSAGE_BYTES = 61  # one batch header
CLEANUP_POLICIES = ("delete", "compact")  # Kafka's order in its error message
_NONE_WORDS = ("", "none", "null")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 64 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    flush_messages: int | None = None
    flush_ms: int | None = None
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    message_timestamp_before_max_ms: int = 2**63 - 1
    message_timestamp_after_max_ms: int = 3_600_000
    message_timestamp_type: str = "CreateTime"

    def __post_init__(self) -> None:
        _check_int("segment_bytes", self.segment_bytes, MIN_SEGMENT_BYTES, INT32_MAX)
        _check_int("segment_ms", self.segment_ms, 1, None)
        _check_int(
            "segment_index_bytes", self.segment_index_bytes, MIN_SEGMENT_INDEX_BYTES, INT32_MAX
        )
        _check_int("index_interval_bytes", self.index_interval_bytes, 1, INT32_MAX)
        _check_int("retention_ms", self.retention_ms, -1, None)
        _check_int("retention_bytes", self.retention_bytes, -1, None)
        if self.flush_messages is not None:
            _check_int("flush_messages", self.flush_messages, 1, None)
        if self.flush_ms is not None:
            _check_int("flush_ms", self.flush_ms, 0, None)
        _check_int("max_message_bytes", self.max_message_bytes, MIN_MESSAGE_BYTES, INT32_MAX)
        # normalized in place (a frozen dataclass: the one sanctioned way to set a field)
        object.__setattr__(self, "cleanup_policy", normalize_cleanup_policy(self.cleanup_policy))
        _check_int("delete_retention_ms", self.delete_retention_ms, 0, None)
        _check_int("min_compaction_lag_ms", self.min_compaction_lag_ms, 0, None)
        _check_int("message_timestamp_before_max_ms", self.message_timestamp_before_max_ms,
                   0, 2**63 - 1)
        _check_int("message_timestamp_after_max_ms", self.message_timestamp_after_max_ms,
                   0, 2**63 - 1)
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidConfigError(f"message_timestamp_type must be one of "
                                     f"{TIMESTAMP_TYPES}, got {self.message_timestamp_type!r}")
        ratio = self.min_cleanable_dirty_ratio
        if (not isinstance(ratio, int | float) or isinstance(ratio, bool)
                or not 0.0 <= ratio <= 1.0):
            raise InvalidConfigError(
                f"min_cleanable_dirty_ratio must be a number in [0, 1], got {ratio!r}"
            )

    @property
    def log_append_time(self) -> bool:
        """True when the leader stamps batches with its clock (LogAppendTime)."""
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """True when the cleaner compacts this log ("compact" in the policy).  (A substring
        test: the normalized policy is ``delete``, ``compact`` or ``compact,delete``; the
        produce path asks this per request.)"""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """True when time and size retention delete old segments ("delete" in the policy)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_dict(cls, d: Mapping[str, str | int | float | None]) -> LogConfig:
        """Build from ``{name: value}``; names as fields or Kafka's dotted names."""
        kwargs: dict[str, object] = {}
        fields = {f.name for f in dataclasses.fields(cls)}
        for raw_key, raw_value in d.items():
            key = str(raw_key).strip().replace(".", "_")
            if key not in fields:
                raise InvalidConfigError(f"unknown log config key {raw_key!r}")
            if key in kwargs:
                raise InvalidConfigError(f"log config key {raw_key!r} given twice")
            kwargs[key] = _parse(key, raw_key, raw_value)
        return cls(**kwargs)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, int | float | str | None]:
        return dataclasses.asdict(self)

    def with_overrides(self, overrides: Mapping[str, str | int | float | None]) -> LogConfig:
        """A copy with ``overrides`` (same key rules as :meth:`from_dict`) applied."""
        merged: dict[str, str | int | float | None] = dict(self.to_dict())
        for raw_key, value in overrides.items():
            key = str(raw_key).strip().replace(".", "_")
            if key not in merged:
                raise InvalidConfigError(f"unknown log config key {raw_key!r}")
            merged[key] = value
        return LogConfig.from_dict(merged)


def normalize_cleanup_policy(value: object) -> str:
    """The policy list ``value`` (``"delete, compact"``, ``"compact,compact"``) as stored:
    ``delete``, ``compact`` or ``compact,delete``; spaces around items ignored, an item
    named twice kept once.  Empty, not a string or an unknown item:
    :class:`InvalidConfigError`."""
    if not isinstance(value, str):
        raise InvalidConfigError(f"cleanup_policy must be a string, got {value!r}")
    items = {item.strip() for item in value.split(",")} - {""}
    if not items or not items <= set(CLEANUP_POLICIES):
        raise InvalidConfigError(f"cleanup_policy must be a list of {CLEANUP_POLICIES}, "
                                 f"got {value!r}")
    return ",".join(sorted(items))


def _parse(key: str, raw_key: object, value: object) -> object:
    if key in ("cleanup_policy", "message_timestamp_type"):
        if not isinstance(value, str):
            raise InvalidConfigError(f"{raw_key}: expected a string, got {value!r}")
        return value.strip()
    if key == "min_cleanable_dirty_ratio":
        return _parse_ratio(raw_key, value)
    optional = key in ("flush_messages", "flush_ms")
    if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
        if optional:
            return None
        raise InvalidConfigError(f"{raw_key}: a value is required")
    if isinstance(value, bool):
        raise InvalidConfigError(f"{raw_key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            raise InvalidConfigError(f"{raw_key}: expected an integer, got {value!r}") from None
    raise InvalidConfigError(f"{raw_key}: expected an integer, got {value!r}")


def _parse_ratio(raw_key: object, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidConfigError(f"{raw_key}: expected a number in [0, 1], got {value!r}")
    try:
        ratio = float(value.strip()) if isinstance(value, str) else float(value)
    except ValueError:
        raise InvalidConfigError(f"{raw_key}: expected a number in [0, 1], got {value!r}") from None
    if not 0.0 <= ratio <= 1.0:  # also rejects nan
        raise InvalidConfigError(f"{raw_key}: expected a number in [0, 1], got {value!r}")
    return ratio


def _check_int(key: str, value: object, low: int, high: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidConfigError(f"{key} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise InvalidConfigError(f"{key} must be {bound}, got {value}")
