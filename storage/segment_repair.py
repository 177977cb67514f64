"""Repairing one closed segment in place: its damaged tail is written again from batches
another replica sends, and every other segment of the log stays as it is.

The scrubber (:mod:`storage.scrubber`) reports a closed segment ``S = [b, n)`` (``n``
the next segment's base offset) whose batches cannot be trusted from byte ``position``
on: the first bad batch starts at offset ``first_bad``.  Cutting the log there would
throw away every intact later segment too - the copies the cluster may need when
another replica finds damage of its own (a fault run lost 1.15 M acknowledged records
that way).  A :class:`SegmentRepair` instead builds a new ``S``:

1. the intact prefix, ``S``'s batches before ``position``, copied and CRC-checked again;
2. the batches from where the prefix ends (``first_bad``) to ``n``, fed to
   :meth:`SegmentRepair.append` in order (the replica fetcher passes what the leader
   sends, as many answers as it takes; each batch is CRC-checked before anything else; a
   batch that fails is never written and the repair waits; a batch that overlaps
   what is already written is skipped, one that starts at or past ``n`` ends the range);
3. :meth:`SegmentRepair.commit` swaps the new file in with the cleaner's crash-safe
   rename protocol (:class:`storage.cleaner.swap.CleanedSegmentWriter`: ``.cleaned`` ->
   ``.swap`` -> final name, fsyncs between; a crash before the commit point leaves the
   old ``S`` and the next open removes the ``.cleaned`` files, one after it completes
   the swap) and rebuilds ``S``'s indexes (its ``.txnindex`` entries are carried as they
   are: the offsets, so the markers, stay where they were).

The new segment holds the same offsets when the other replica's batches have the same
boundaries, which is the case for every log that is not compacted (followers append the
leader's batches as they are).  A batch that straddles ``first_bad`` or ``n`` (the
replicas compacted the range differently) cannot be spliced in:
:class:`SegmentRepairError`, and the owner falls back to cutting the log.  So does a
repair whose segment changed under it (:attr:`SegmentRepair.valid` turns false when the
segment left the log's list: deleted by retention, compacted, truncated into).

A repair never changes the log end, the log start or any other segment, so the log can
keep appending (the fetcher keeps the replica in sync) while the repair fills in.  Only
one file at a time is written: memory is bounded by one fetch answer.

Costs: the prefix copy O(prefix bytes) (one ``pread`` and one CRC pass per batch, done
in the constructor, on the owner's thread: 86 ms for a whole 64 MiB segment of 16 KiB
batches on the 2-core CI machine); :meth:`append` O(bytes) CRC + one ``write`` per batch; the commit
3 fsyncs of files, 3 of the directory, 9 renames and an index load.  Not thread-safe:
owned by the thread that owns the log (the broker's event loop), like the cleaner, which
must not clean a log while it is being repaired (both write ``<base>.log.cleaned``).
"""

from __future__ import annotations

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import HEADER_SIZE, read_header, validate_batch
from storage.cleaner.swap import CleanedSegmentWriter
from storage.errors import StorageError
from storage.log.log import Log
from storage.segment import Segment

__all__ = ["SegmentRepair", "SegmentRepairError"]


class SegmentRepairError(StorageError):
    """The repair cannot go on (the segment changed, or a batch does not fit the range)."""


class SegmentRepair:
    """A new copy of one closed segment of ``log``: its batches before byte ``position``,
    then the range from there to the next segment's base offset, fed by :meth:`append`."""

    def __init__(self, log: Log, segment_base_offset: int, position: int) -> None:
        segments = log.segments
        i = next((k for k, s in enumerate(segments) if s.base_offset == segment_base_offset),
                 -1)
        if i < 0 or i == len(segments) - 1:
            raise SegmentRepairError(
                f"{log.dir}: segment {segment_base_offset} is "
                f"{'not in the log' if i < 0 else 'the active one'}; it cannot be repaired "
                "in place")
        self.log = log
        self.segment: Segment = segments[i]
        self.end_offset = segments[i + 1].base_offset  # the range ends where the next starts
        # the first offset still to be written: where the intact prefix ends (not the bad
        # batch's own base offset, a header field its CRC does not cover)
        self.next_offset = self.segment.base_offset
        self.done = False
        self._writer = CleanedSegmentWriter(log, [self.segment])
        try:
            self._copy_prefix(position)
        except BaseException:
            self._writer.discard()
            raise
        self.first_bad_offset = self.next_offset

    def _copy_prefix(self, position: int) -> None:
        seg = self.segment
        try:
            for batch in seg.iter_batches(0, position):
                data = seg.read_bytes(batch.position, batch.size)
                validate_batch(data)
                self._writer.write(data, batch.base_offset, batch.max_timestamp)
                self.next_offset = batch.last_offset + 1
        except (CorruptRecordError, StorageError) as exc:  # damaged since it was scrubbed
            raise SegmentRepairError(f"{seg.log_path}: before byte {position}, the part "
                                     f"to keep, is bad too: {exc}") from None

    @property
    def valid(self) -> bool:
        """The segment is still one of the log's closed segments, and the same one follows
        it.  (Not its ``next_offset``: read from the last batch's header after a restart,
        it is garbage when that batch is the damaged one.)"""
        segments = self.log.segments
        return (not self.log.closed and self.segment.fd >= 0
                and any(s is self.segment for s in segments[:-1])
                and segments[segments.index(self.segment) + 1].base_offset == self.end_offset)

    def append(self, records: bytes | bytearray | memoryview) -> None:
        """Write the batches of ``records`` that fall in what is still missing; a trailing
        partial batch is ignored (a fetch answer may end with one)."""
        if self.done:
            return
        if not self.valid:
            raise SegmentRepairError(f"{self.segment.log_path}: the segment changed while "
                                     "it was being repaired")
        view = memoryview(records)
        pos, size = 0, len(view)
        while pos + HEADER_SIZE <= size:
            if pos + read_header(view, pos).size_in_bytes > size:
                break
            # CRC first: the offsets below decide what is written or whether the log is
            # cut, and bad bytes from the other replica must only make the repair wait
            header = validate_batch(view, pos)
            if header.base_offset >= self.end_offset:
                self.done = True
                break
            if header.last_offset >= self.next_offset:
                if header.base_offset < self.next_offset or header.last_offset >= self.end_offset:
                    raise SegmentRepairError(
                        f"{self.segment.log_path}: the batch [{header.base_offset}, "
                        f"{header.last_offset}] straddles the repaired range's edge "
                        f"[{self.next_offset}, {self.end_offset}): the replicas' batches "
                        "differ here")
                self._writer.write(bytes(view[pos:pos + header.size_in_bytes]),
                                   header.base_offset, header.max_timestamp)
                self.next_offset = header.last_offset + 1
            pos += header.size_in_bytes
        if self.next_offset >= self.end_offset:
            self.done = True

    def commit(self, now_ms: int) -> Segment:
        """Swap the repaired segment in (crash-safe, see the module docstring)."""
        if not self.done:
            raise SegmentRepairError(f"{self.segment.log_path}: offsets from "
                                     f"{self.next_offset} on are still missing")
        if not self.valid:
            self.abort()
            raise SegmentRepairError(f"{self.segment.log_path}: the segment changed while "
                                     "it was being repaired")
        return self._writer.swap_in(now_ms)

    def abort(self) -> None:
        """Remove what was written; the damaged segment stays as it was."""
        self._writer.discard()
