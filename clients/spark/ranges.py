"""Offset ranges: what a Spark query reads, planned on the driver.

An :class:`OffsetRange` is one Spark input partition: ``[from_offset, until_offset)`` of
one topic partition.  Planning finds the partitions read (``subscribe``/``assign`` by
Metadata; ``subscribePattern`` by listing every topic and keeping the non-internal ones
the regex fully matches), turns the options' offset specs into exact numbers with
ListOffsets (earliest = log start offset, latest = the high watermark, so nothing at or
above HW is ever planned; under ``kafka.isolation.level=read_committed`` latest is the
last stable offset, so no range reaches into a transaction still open) and timestamp
specs with ListOffsets by timestamp (the first offset at or after it; none: the
starting side fails with Spark's message or, with
``startingOffsetsByTimestampStrategy=latest``, takes latest; the ending side takes
latest), checks them against the partition's bounds (with ``failOnDataLoss=false`` an
offset below the log start is moved up to it with a warning, as Spark skips data aged
out), and splits ranges: longer than ``maxRecordsPerPartition`` into consecutive
pieces, then, while there are fewer than ``minPartitions``, large ranges in proportion
to their share of all records (Spark's KafkaOffsetRangeCalculator arithmetic).

Streaming offsets (what Spark checkpoints) are JSON-able dicts
``{"topic": {"0": next_offset, ...}}`` with partition numbers as strings (JSON keys),
the same shape as Spark's Kafka source.

Design choices:

* A partition that appears later (``subscribe`` and the topic grew) is read from its
  earliest offset (as Spark's Kafka source does); with ``assign`` the set is fixed.
* A high watermark below the checkpointed offset (an unclean leader election lost
  records) never moves a query backwards: the planned end is ``max(start, HW)``.
* ``maxOffsetsPerTrigger`` is shared out in proportion to each partition's backlog with
  largest remainders, so the micro-batch holds exactly ``min(limit, backlog)`` records
  and every partition with a backlog progresses once its share reaches one record.

Costs: one Metadata and two ListOffsets round trips per planning (per topic for
Metadata; one all-topics Metadata for a pattern; one more ListOffsets per timestamp
spec); splitting and rate limiting are O(partitions + pieces).
Thread safety: an :class:`OffsetPlanner` owns a Consumer: one thread at a time.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from clients.admin import Admin
from clients.config.kafka_names import ADMIN_KEYWORDS
from clients.consumer.consumer import Consumer
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, TimestampSpec

__all__ = [
    "OffsetPlanner",
    "OffsetRange",
    "cap_offsets",
    "from_json_offsets",
    "min_partitions_split",
    "split_range",
    "to_json_offsets",
]

Offsets = dict[TopicPartition, int]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records ``[from_offset, until_offset)`` of ``topic``-``partition`` (picklable)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def count(self) -> int:
        return self.until_offset - self.from_offset


def split_range(tp: TopicPartition, start: int, end: int, max_records: int) -> list[OffsetRange]:
    """``[start, end)`` as consecutive ranges of at most ``max_records`` (none if empty)."""
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    return [
        OffsetRange(tp.topic, tp.partition, lo, min(lo + max_records, end))
        for lo in range(start, end, max_records)
    ]


def min_partitions_split(ranges: list[OffsetRange], min_partitions: int) -> list[OffsetRange]:
    """Spark's minPartitions arithmetic: with fewer non-empty ranges than
    ``min_partitions``, each range whose share of all records rounds to more than one
    part is split into that many near-equal parts (the others stay whole, and their
    records are left out of the shares)."""
    ranges = [r for r in ranges if r.count > 0]
    if len(ranges) >= min_partitions:
        return ranges
    total = sum(r.count for r in ranges)
    whole = [r for r in ranges if _part_count(r.count, total, min_partitions) == 1]
    split_total = total - sum(r.count for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    keep = {(r.topic, r.partition) for r in whole}
    out: list[OffsetRange] = []
    for r in ranges:
        parts = 1 if (r.topic, r.partition) in keep else _part_count(r.count, split_total,
                                                                     split_min)  # fmt: skip
        out.extend(_divided(r, parts))
    return out


def _part_count(size: int, total: int, min_parts: int) -> int:
    """Scala's ``max(math.round(size / total * min_parts), 1)``, at most ``size`` (a
    huge ``minPartitions`` then costs O(records), not O(minPartitions))."""
    return min(max(math.floor(size / total * min_parts + 0.5), 1), size)


def _divided(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` near-equal pieces (the last ones take the rounding)."""
    out: list[OffsetRange] = []
    remaining, start = r.count, r.from_offset
    for part in range(parts):
        size = remaining // (parts - part)
        remaining -= size
        end = min(start + size, r.until_offset)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def to_json_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json_offsets(value: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of :func:`to_json_offsets` (a checkpointed dict, keys are strings)."""
    try:
        return {
            TopicPartition(topic, int(part)): int(offset)
            for topic, parts in value.items() for part, offset in parts.items()
        }  # fmt: skip
    except (AttributeError, TypeError, ValueError) as e:
        raise InvalidConfigError(f"malformed minikafka offsets {value!r}: {e}") from None


def cap_offsets(start: Offsets, end: Offsets, limit: int) -> Offsets:
    """``end`` lowered so that at most ``limit`` records lie between ``start`` and it,
    shared in proportion to each partition's backlog (largest remainders)."""
    backlog = {tp: max(0, e - start.get(tp, e)) for tp, e in end.items()}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    shares = {tp: limit * n // total for tp, n in backlog.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(limit * backlog[tp] % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return {tp: (start[tp] + shares[tp] if tp in start else e) for tp, e in end.items()}


class OffsetPlanner:
    """Resolves partitions and offsets for a query through its own :class:`Consumer`."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._consumer: Consumer | None = None
        self._admin: Admin | None = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(**self.options.consumer_kwargs(
                bootstrap_servers=self.options.bootstrap_servers,
                request_timeout_ms=self.options.request_timeout_ms,
                client_id="minikafka-spark-planner",
            ), auto_offset_reset="none", enable_auto_commit=False,
               isolation_level=self.options.isolation_level)  # fmt: skip
        return self._consumer

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            settings = self.options.consumer_kwargs(
                request_timeout_ms=self.options.request_timeout_ms,
                client_id="minikafka-spark-planner")
            self._admin = Admin(self.options.bootstrap_servers, **{
                k: v for k, v in settings.items() if k in ADMIN_KEYWORDS})  # fmt: skip
        return self._admin

    def __getstate__(self) -> dict[str, object]:
        """Pickled without its clients (Spark ships readers to executors)."""
        return {"options": self.options, "_consumer": None, "_admin": None}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def topic_partitions(self, *, missing_ok: bool = False) -> list[TopicPartition]:
        """Every partition read: subscribed topics' partitions (fresh metadata), the
        partitions of every non-internal topic the pattern fully matches, or the
        assigned ones (each checked to exist).  ``missing_ok`` (a running stream: a
        deleted topic is the caller's data-loss question) leaves out topics and
        partitions that do not exist instead of failing."""
        pattern = self.options.subscribe_pattern
        if pattern is not None:
            regex = re.compile(pattern)
            return sorted(
                TopicPartition(d.name, p.partition)
                for d in self.admin.describe_topics(
                    timeout_ms=self.options.request_timeout_ms).values()
                if not d.is_internal and regex.fullmatch(d.name) for p in d.partitions
            )
        known: dict[str, list[int]] = {}
        for topic in self.options.topics:
            parts = self.consumer.partitions_for(topic, self.options.request_timeout_ms)
            if parts is None and missing_ok:
                parts = []
            elif parts is None:
                raise MiniKafkaError(
                    f"unknown topic {topic!r} (minikafka does not auto-create topics)",
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                )
            known[topic] = sorted(parts)
        if self.options.subscribe:
            return [TopicPartition(t, p) for t in self.options.subscribe for p in known[t]]
        missing = [tp for tp in self.options.assign if tp.partition not in known[tp.topic]]
        if missing and missing_ok:
            return sorted(set(self.options.assign) - set(missing))
        if missing:
            raise MiniKafkaError(
                "assigned partitions do not exist: "
                + ", ".join(f"{tp.topic}-{tp.partition} (topic has {len(known[tp.topic])})"
                            for tp in missing),
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )  # fmt: skip
        return sorted(self.options.assign)

    def list_offsets(self, tps: Iterable[TopicPartition], which: int) -> Offsets:
        """Earliest (-2: log start) or latest (-1: the high watermark; under
        ``read_committed`` the last stable offset) offset of each."""
        tps = list(tps)
        if not tps:
            return {}
        consumer = self.consumer
        consumer.assign(tps)
        if which == EARLIEST:
            consumer.seek_to_beginning(tps)
        else:
            consumer.seek_to_end(tps)
        return {tp: consumer.position(tp, self.options.request_timeout_ms) for tp in tps}

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartition], name: str,
                bounds: tuple[Offsets, Offsets]) -> Offsets:
        """Exact offsets for ``spec`` over ``tps``, each within [earliest, latest]."""
        earliest, latest = bounds
        if isinstance(spec, int):
            return dict(earliest if spec == EARLIEST else latest)
        missing = [tp for tp in tps if tp not in spec]
        if missing:
            raise InvalidConfigError(
                f"option {name!r} must name every partition read (as in Spark); missing: "
                + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            )
        unknown = sorted(set(spec) - set(tps))
        if unknown:
            raise MiniKafkaError(
                f"option {name!r} names partitions that do not exist: "
                + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unknown),
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
        out: Offsets = {}
        for tp in tps:
            offset = spec[tp]
            if offset == EARLIEST:
                offset = earliest[tp]
            elif offset == LATEST:
                offset = latest[tp]
            elif offset < earliest[tp] and not self.options.fail_on_data_loss:
                log.warning(
                    "%s: offset %d of %s-%d is below the log start offset %d: records "
                    "[%d, %d) were deleted (retention or DeleteRecords) and are skipped "
                    "(failOnDataLoss=false)", name, offset, tp.topic, tp.partition,
                    earliest[tp], offset, earliest[tp])  # fmt: skip
                offset = earliest[tp]
            elif not earliest[tp] <= offset <= latest[tp]:
                raise MiniKafkaError(
                    f"option {name!r}: offset {offset} of {tp.topic}-{tp.partition} is outside "
                    f"[{earliest[tp]}, {latest[tp]}] (log start offset, high watermark)",
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                )
            out[tp] = offset
        return out

    def bounds(self, tps: list[TopicPartition]) -> tuple[Offsets, Offsets]:
        return self.list_offsets(tps, EARLIEST), self.list_offsets(tps, LATEST)

    def starting(self, tps: list[TopicPartition], bounds: tuple[Offsets, Offsets]) -> Offsets:
        """The start offsets: by ``startingTimestamp`` / ``startingOffsetsByTimestamp``
        if given, else by ``startingOffsets``."""
        spec = self.options.starting_timestamps
        if spec is None:
            return self.resolve(self.options.starting_offsets, tps, "startingOffsets", bounds)
        return self._by_timestamp(spec, tps, bounds[1], "startingOffsetsByTimestamp",
                                  fail_on_none=self.options.fail_on_no_matching_start)

    def ending(self, tps: list[TopicPartition], bounds: tuple[Offsets, Offsets]) -> Offsets:
        """The end offsets (batch): by ``endingTimestamp`` / ``endingOffsetsByTimestamp``
        if given (latest where no offset matches), else by ``endingOffsets``."""
        spec = self.options.ending_timestamps
        if spec is None:
            return self.resolve(self.options.ending_offsets, tps, "endingOffsets", bounds)
        return self._by_timestamp(spec, tps, bounds[1], "endingOffsetsByTimestamp",
                                  fail_on_none=False)

    def _by_timestamp(self, spec: TimestampSpec, tps: list[TopicPartition], latest: Offsets,
                      name: str, *, fail_on_none: bool) -> Offsets:
        if isinstance(spec, int):
            wanted = dict.fromkeys(tps, spec)
        else:
            self.resolve(dict.fromkeys(spec, LATEST), tps, name, ({}, latest))  # names check
            wanted = {tp: spec[tp] for tp in tps}
        found = self.consumer.offsets_for_times(wanted, self.options.request_timeout_ms) \
            if wanted else {}
        out: Offsets = {}
        for tp in tps:
            match = found.get(tp)
            if match is None and fail_on_none:
                raise MiniKafkaError(
                    f"No offset matched from request of topic-partition {tp.topic}-"
                    f"{tp.partition} and timestamp {wanted[tp]}.",
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                )
            out[tp] = latest[tp] if match is None else min(match.offset, latest[tp])
        return out
