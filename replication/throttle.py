"""The follower's replication throttle (Kafka's ``follower.replication.throttled.rate``):
a bound on the bytes per second a broker fetches for its *throttled* replicas, those not
in their partition's ISR (a replica a reassignment adds, or one catching up after a
restart), so copying a partition to a new broker does not starve the in-sync traffic.

:class:`ReplicationThrottle` is a token bucket: ``rate_bytes_per_s`` tokens a second, at
most one second's worth saved up; every record byte fetched for a throttled replica
takes one.  While the bucket is empty (:meth:`exceeded`) the follower leaves its
throttled replicas out of its Fetch requests (Kafka's rule: in-sync replicas are never
held back) and waits :meth:`delay_ms` when nothing else is to be fetched; a throttled
replica's ``partition_max_bytes`` is capped at the tokens left (:meth:`max_bytes`), so
one answer overshoots the rate by at most one record batch (a fetch returns at least one
whole batch).  Rate 0: no throttle.

The rate changes at run time (:meth:`set_rate`: the dynamic broker config
``follower.replication.throttled.rate``, :mod:`broker.dynamic_config.broker_configs`):
the tokens earned so far are counted at the old rate, then capped at one second of the
new one; a throttle switched on starts with a full second's worth, one switched off lets
everything through at once.

Sans-IO: time from the injected ``clock_ms``.  Costs: O(1) per call.  Thread-safety:
none; the broker's event loop (one bucket shared by all its fetchers).
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["ReplicationThrottle"]


class ReplicationThrottle:
    """A token bucket over the bytes fetched for throttled replicas."""

    def __init__(self, rate_bytes_per_s: int, clock_ms: Callable[[], int]) -> None:
        if rate_bytes_per_s < 0:
            raise ValueError(f"rate_bytes_per_s must be >= 0, got {rate_bytes_per_s}")
        self.rate = rate_bytes_per_s
        self._clock_ms = clock_ms
        self._tokens = float(rate_bytes_per_s)
        self._at_ms = clock_ms()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def set_rate(self, rate_bytes_per_s: int) -> None:
        """Take a new rate from now on (0: no throttle); see the module docstring."""
        if rate_bytes_per_s < 0:
            raise ValueError(f"rate_bytes_per_s must be >= 0, got {rate_bytes_per_s}")
        if self.enabled:
            self._refill()
            self._tokens = min(self._tokens, float(rate_bytes_per_s))
        else:
            self._tokens = float(rate_bytes_per_s)
            self._at_ms = self._clock_ms()
        self.rate = rate_bytes_per_s

    def _refill(self) -> None:
        now = self._clock_ms()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at_ms) * self.rate / 1000)
        self._at_ms = now

    def exceeded(self) -> bool:
        """Whether throttled replicas must wait (no tokens left)."""
        if not self.enabled:
            return False
        self._refill()
        return self._tokens < 1

    def max_bytes(self, limit: int) -> int:
        """A throttled replica's ``partition_max_bytes``: the tokens left, within
        ``[1, limit]`` (``limit`` when there is no throttle)."""
        if not self.enabled:
            return limit
        self._refill()
        return max(1, min(limit, int(self._tokens)))

    def record(self, nbytes: int) -> None:
        """``nbytes`` of records were fetched for throttled replicas."""
        if self.enabled:
            self._refill()
            self._tokens -= nbytes

    def delay_ms(self) -> int:
        """How long until a token is back (0: now)."""
        if not self.exceeded():
            return 0
        return max(1, math.ceil((1 - self._tokens) * 1000 / self.rate))
