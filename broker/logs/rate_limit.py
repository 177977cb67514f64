"""Rate-limited log lines: a line per key at most once per interval, then a count of the
ones suppressed.

:class:`RateLimitedLog` wraps a :class:`logging.Logger`.  ``log(level, key, msg, *args)``
emits the line when ``key`` (any hashable: a partition, a producer, an error) was not
logged in the last ``interval_ms`` of the injected clock; otherwise it only counts it.
The next line of that key that is emitted (after the interval) carries
``" (N similar suppressed)"`` when N > 0, so nothing is lost silently, only collapsed.
Keys are independent: one partition's storm does not hide another's first line.

Bounds: at most ``max_keys`` keys are remembered (least recently emitted forgotten first;
a forgotten key's next line is emitted, its suppressed count lost).  Sans-IO apart from
the logger it writes to: time comes from the clock, nothing sleeps or schedules, so a
suppressed count is reported on the key's next line, never on its own.

Costs: O(1) per call (a dict lookup; eviction O(1) amortised).  Not thread-safe: one
owner (an event loop or one thread).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable

from timer.clock import Clock

DEFAULT_INTERVAL_MS = 10_000
DEFAULT_MAX_KEYS = 10_000


class RateLimitedLog:
    """A logger whose lines repeat per key at most once per ``interval_ms``."""

    def __init__(self, logger: logging.Logger, clock: Clock,
                 interval_ms: int = DEFAULT_INTERVAL_MS,
                 max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if interval_ms < 0 or max_keys < 1:
            raise ValueError(f"interval_ms {interval_ms} must be >= 0 and max_keys "
                             f"{max_keys} >= 1")
        self.logger = logger
        self.clock = clock
        self.interval_ms = interval_ms
        self.max_keys = max_keys
        # key -> [time of its last emitted line, lines suppressed since]
        self._keys: OrderedDict[Hashable, list[int]] = OrderedDict()
        self.suppressed_total = 0

    def log(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` was logged within the interval;
        returns whether it was emitted."""
        if not self.logger.isEnabledFor(level):
            return False
        now = self.clock.now_ms()
        seen = self._keys.get(key)
        if seen is not None and now - seen[0] < self.interval_ms:
            seen[1] += 1
            self.suppressed_total += 1
            return False
        suppressed = 0 if seen is None else seen[1]
        if seen is None:
            self._keys[key] = [now, 0]
            if len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        else:
            seen[0], seen[1] = now, 0
            self._keys.move_to_end(key)
        if suppressed:
            self.logger.log(level, msg + " (%d similar suppressed)", *args, suppressed)
        else:
            self.logger.log(level, msg, *args)
        return True

    def info(self, key: Hashable, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, key, msg, *args)

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)
