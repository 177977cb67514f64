"""The cleaner's key -> latest offset map, bounded by an accounted memory budget.

Kafka's ``SkimpyOffsetMap`` stores 16-byte MD5 digests in a fixed byte buffer.  Here the
map is a plain ``dict`` keyed by the record key's bytes (exact: no digest collisions, and
the fastest structure available to Python code) whose memory is *accounted*, not
preallocated: every distinct key costs ``len(key) + ENTRY_OVERHEAD_BYTES``, an estimate
of CPython's per-entry cost (a bytes object ~33 B + its payload, an int ~32 B, a dict
slot with its share of the hash table ~40-60 B).  :meth:`OffsetMap.try_put_batch` refuses
a batch whose new keys would push the accounted total past ``capacity_bytes``, so the
cleaner can stop building the map at a batch boundary and clean what the map covers
(the rest waits for the next pass).

No on-disk format: the map lives for one cleaning pass.

Costs: ``get``/``put`` O(1) average; ``try_put_batch`` O(keys in the batch) (account,
then insert); ``clear`` O(entries).  Not thread-safe: owned by one
:class:`~storage.cleaner.LogCleaner` (the broker's event-loop thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

ENTRY_OVERHEAD_BYTES = 120
MIN_CAPACITY_BYTES = 256


class OffsetMap:
    """``key -> offset`` of its latest occurrence in the scanned range (memory-bounded)."""

    def __init__(self, capacity_bytes: int) -> None:
        if (not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool)
                or capacity_bytes < MIN_CAPACITY_BYTES):
            raise ValueError(
                f"capacity_bytes must be an integer >= {MIN_CAPACITY_BYTES}, got {capacity_bytes!r}"
            )
        self.capacity_bytes = capacity_bytes
        self._offsets: dict[bytes, int] = {}
        # the dict's own bound method: no wrapper call on the per-record path
        self.get: Callable[[bytes], int | None] = self._offsets.get
        self._used_bytes = 0
        self.latest_offset = -1  # highest offset put so far (-1: none)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def used_bytes(self) -> int:
        return self._used_bytes

    @property
    def utilization(self) -> float:
        return self._used_bytes / self.capacity_bytes


    def try_put_batch(self, keys: Sequence[bytes], offsets: Sequence[int]) -> bool:
        """Put every ``(key, offset)`` (offsets increasing) or, if the new keys do not fit
        in the remaining budget, nothing at all; returns whether they were put."""
        known = self._offsets
        extra = 0
        fresh: set[bytes] = set()
        for key in keys:
            if key not in known and key not in fresh:
                fresh.add(key)
                extra += len(key) + ENTRY_OVERHEAD_BYTES
        if self._used_bytes + extra > self.capacity_bytes:
            return False
        known.update(zip(keys, offsets, strict=True))
        self._used_bytes += extra
        if offsets:
            self.latest_offset = max(self.latest_offset, offsets[-1])
        return True

    def clear(self) -> None:
        self._offsets.clear()
        self._used_bytes = 0
        self.latest_offset = -1

    def __repr__(self) -> str:
        return (f"OffsetMap(keys={len(self._offsets)}, used={self._used_bytes}/"
                f"{self.capacity_bytes} bytes)")
