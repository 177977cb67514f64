"""Record-level views of a replica's log for the invariant checks of
:class:`tests.sim.cluster.SimCluster`: every record by offset (decoded once per batch and
cached), record equality across replicas, the latest offset of each key (compaction), and
a count-and-hash digest of a range of batches (byte-level replica agreement).

Pure functions over a log's ``batches()``; no I/O beyond what the log's reads do.  Cost:
:func:`records` decodes each batch once per (base offset, epoch, CRC, size) for the
cache's life; :func:`digest` walks the batches below ``below``.
"""

from __future__ import annotations

import zlib
from typing import Any

from clients.records.record import decode_batch
from tests.sim.sim_log import MemoryLog

RecordId = tuple[bytes | None, bytes | None, int]  # key, value, partition leader epoch


def records(log: Any, cache: dict[tuple[int, int, int, int], list[tuple[int, RecordId]]]
             ) -> dict[int, RecordId]:
    """Offset -> (key, value, partition leader epoch) of every record in ``log``
    (``cache``: decoded batches by base offset, leader epoch - not covered by the CRC -,
    CRC and size)."""
    out: dict[int, RecordId] = {}
    for header, data in log.batches():
        if header.record_count:
            key = (header.base_offset, header.partition_leader_epoch, header.crc, len(data))
            records = cache.get(key)
            if records is None:
                records = cache[key] = [
                    (r.offset, (r.key, r.value, header.partition_leader_epoch))
                    for r in decode_batch(data, validate=False)]
            out.update(records)
    return out


def same_record(a: RecordId, b: RecordId) -> bool:
    """Key, value and epoch equal (an epoch of -1 is unknown: any)."""
    return a[:2] == b[:2] and (a[2] == b[2] or a[2] < 0 or b[2] < 0)


def latest_offsets(records: dict[int, RecordId]) -> dict[bytes | None, int]:
    """Key -> the highest offset holding it."""
    latest: dict[bytes | None, int] = {}
    for offset, (key, _, _) in records.items():
        if offset > latest.get(key, -1):
            latest[key] = offset
    return latest


def digest(log: Any, low: int, below: int) -> tuple[int, int]:
    """The count and a hash of the batches starting in ``[low, below)``."""
    if isinstance(log, MemoryLog):
        return log.range_digest(low, below)
    n, h = 0, 0
    for header, data in log.batches():
        if header.base_offset >= below:
            break
        if header.base_offset >= low:
            n, h = n + 1, zlib.crc32(data, h)
    return n, h

