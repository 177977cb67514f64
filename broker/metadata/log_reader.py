"""The metadata follower's sans-IO core: the controller's metadata log, read in order.

A broker keeps a :class:`~broker.metadata.image.MetadataImage` by reading the
controller's metadata log (``__cluster_metadata``-0) with Fetch requests from
:attr:`MetadataLogReader.fetch_offset` (the first offset it has not applied).  Each
answer is handed to :meth:`MetadataLogReader.on_answer`: the answer's records (Kafka v2
record batches whose record values are the msgpack records of
:mod:`broker.metadata.records`; the metadata offset is the record offset) and the log's
high watermark.  The socket side (:mod:`broker.metadata.follower`) and the simulation
(``tests/sim``) feed it the same way.

Rules:

- Records are applied in offset order; those below :attr:`fetch_offset` (a batch that
  starts earlier) are skipped.  The first new record must be at :attr:`fetch_offset`
  and each next one at the offset after it (a control record of the controller
  quorum, LeaderChange, takes its offset and is counted as applied:
  :meth:`~broker.metadata.image.MetadataImage.advance_to`): an answer with a gap is refused whole
  (:class:`~broker.metadata.records.MetadataRecordError`, nothing applied), as is one
  with a bad batch or record (CRC, msgpack, fields).
- The image may be acted on (:meth:`on_answer` returns True: the owner reconciles its
  replicas with it) only when it holds every record up to the high watermark the answer
  carried and something was applied since the last time.  A broker catching up over
  several answers never acts on a partial image: a topic deleted and re-created under
  the same name between two answers would otherwise drop the live log.
- OFFSET_OUT_OF_RANGE (:meth:`on_out_of_range`: the log no longer has
  :attr:`fetch_offset`) starts a new, empty image read from offset 0; the owner must
  use :attr:`image` from then on (the old object is not reused).

Costs: O(bytes) to CRC-check and decode an answer plus O(records) to apply it.
Not thread-safe: one owner (the broker's event loop, or the simulation).
"""

from __future__ import annotations

from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecordError, decode_log_entries

__all__ = ["MetadataLogReader"]


class MetadataLogReader:
    """Applies metadata log answers to :attr:`image` (see the module docstring)."""

    def __init__(self, image: MetadataImage | None = None) -> None:
        self.image = image if image is not None else MetadataImage()
        self.at_high_watermark = False  # the image holds every record the log has
        self._unreconciled = False  # records applied since the image was last acted on

    @property
    def fetch_offset(self) -> int:
        """The next offset to read: one past the last applied record."""
        return self.image.last_applied_offset + 1

    def on_answer(self, records: bytes | bytearray | memoryview | None,
                  high_watermark: int) -> bool:
        """Apply one Fetch answer's records; True when the owner should reconcile now."""
        start = self.fetch_offset
        decoded = decode_log_entries(records or b"", start)
        for expected, (offset, _record) in enumerate(decoded, start):
            if offset != expected:
                raise MetadataRecordError(
                    f"metadata records are not contiguous: offset {offset} where "
                    f"{expected} was next; nothing of this answer applied")
        for offset, record in decoded:
            if record is None:  # a quorum control record: an offset, no metadata
                self.image.advance_to(offset)
            else:
                self.image.apply(record, offset)
        self._unreconciled |= bool(decoded)
        self.at_high_watermark = self.fetch_offset >= high_watermark
        if self._unreconciled and self.at_high_watermark:
            self._unreconciled = False
            return True
        return False

    def on_out_of_range(self) -> None:
        """The log no longer has :attr:`fetch_offset`: rebuild from an empty image (acted
        on once it is complete)."""
        self.image = MetadataImage()
        self.at_high_watermark = False
        self._unreconciled = True
