"""The state of one compaction pass in progress, and how a pass groups segments.

A :class:`CleanPass` is created when the cleaner chooses a log and lives across bounded
steps: phase 1 fills the offset map and moves ``map_end``/``map_seg``/``map_pos``;
phase 2 walks ``groups`` (from :func:`group_segments`), one
:class:`~storage.cleaner.swap.CleanedSegmentWriter` at a time.  The phases themselves are
:class:`storage.cleaner.LogCleaner` methods.

Grouping: consecutive segments go into one output while their sizes sum to <=
``segment_bytes``, their offset-index entries fit one index (``segment_index_bytes``)
and their offsets stay within a 32-bit relative offset of the first base.

Costs: grouping O(segments); :func:`batch_max_timestamp` O(1) (one header unpack, the
layout of :data:`clients.records.batch.HEADER`).  Not thread-safe: owned by the cleaner's
owner thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clients.protocol.topics import TopicPartition
from clients.records.batch import HEADER
from storage.cleaner.batch_filter import BatchFilter
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.swap import CleanedSegmentWriter
from storage.cleaner.txn_filter import TxnFilter
from storage.config import LogConfig
from storage.index.time_index import TimeIndex
from storage.log.log import Log
from storage.records.scan import INT32_MAX
from storage.segment import Segment

__all__ = ["CleanPass", "batch_max_timestamp", "group_segments"]


@dataclass
class CleanPass:
    tp: TopicPartition
    log: Log
    first_dirty: int
    end: int  # first uncleanable offset
    segments: list[Segment]  # every segment with base < end, at the start of the pass
    offset_map: OffsetMap
    now_ms: int
    map_end: int = -1
    map_seg: int = 0
    map_pos: int = -1
    producer_last: dict[int, int] = field(default_factory=dict)
    map_txn: TxnFilter | None = None  # the map phase's walk (aborted data is not mapped)
    groups: list[list[Segment]] = field(default_factory=list)
    grouped: bool = False
    group_i: int = 0
    group: CleanedSegmentWriter | None = None
    rules: BatchFilter | None = None


def batch_max_timestamp(batch: bytes) -> int:
    """The ``max_timestamp`` field of the batch header at the start of ``batch``."""
    return int(HEADER.unpack_from(batch)[8])


def group_segments(cfg: LogConfig, segments: list[Segment]) -> list[list[Segment]]:
    """Consecutive segments whose sizes sum to <= ``cfg.segment_bytes`` (one output each);
    their index entries and relative offsets must fit one segment too."""
    max_entries = cfg.segment_index_bytes // TimeIndex.ENTRY_SIZE - 1
    groups: list[list[Segment]] = []
    size = entries = 0
    for seg in segments:
        if groups:
            group = groups[-1]
            if (size + seg.size <= cfg.segment_bytes
                    and entries + seg.index.entries <= max_entries
                    and seg.next_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(seg)
                size += seg.size
                entries += seg.index.entries
                continue
        groups.append([seg])
        size, entries = seg.size, seg.index.entries
    return groups
