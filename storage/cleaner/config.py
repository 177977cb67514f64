"""The log cleaner's value types: its configuration, statistics and step results.

:class:`CleanerConfig` bounds the cleaner's memory (``dedupe_buffer_bytes``, the offset
map) and work per step (``step_bytes``); bad values raise :class:`InvalidConfigError`.
:class:`CleanerStats` accumulates what the passes did (the error list keeps the last
:data:`MAX_ERRORS_KEPT`); :class:`CleanStepResult` is what one
:meth:`storage.cleaner.LogCleaner.clean_step` returns.

Costs: O(1) each.  ``CleanerConfig`` and ``CleanStepResult`` are immutable (thread-safe);
``CleanerStats`` is mutated by its cleaner's owner thread only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from clients.protocol.errors import InvalidConfigError
from clients.protocol.topics import TopicPartition
from storage.cleaner.offset_map import MIN_CAPACITY_BYTES

__all__ = ["MAX_ERRORS_KEPT", "CleanStepResult", "CleanerConfig", "CleanerStats"]

MAX_ERRORS_KEPT = 32


@dataclass(frozen=True)
class CleanerConfig:
    """``dedupe_buffer_bytes``: offset map budget (Kafka's log.cleaner.dedupe.buffer.size);
    ``step_bytes``: default input bytes per :meth:`LogCleaner.clean_step`."""

    dedupe_buffer_bytes: int = 32 * 1024 * 1024
    step_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        for name, low in (("dedupe_buffer_bytes", MIN_CAPACITY_BYTES), ("step_bytes", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass
class CleanerStats:
    passes_completed: int = 0
    passes_aborted: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_dropped: int = 0
    tombstones_dropped: int = 0
    keyless_dropped: int = 0
    aborted_dropped: int = 0  # records of aborted transactions
    markers_dropped: int = 0  # transaction markers past their delete horizon
    segments_swapped: int = 0
    errors: list[str] = field(default_factory=list)  # the last MAX_ERRORS_KEPT


class CleanStepResult(NamedTuple):
    topic_partition: TopicPartition | None  # the log worked on (None: nothing to do)
    bytes_read: int
    pass_done: bool  # this step finished a pass
