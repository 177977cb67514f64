"""Record-level work of the log cleaner: walking a batch's records and rewriting a batch.

Formats: RecordBatch v2 as in :mod:`clients.records.batch` (61-byte header, then records:
``varint length | int8 attributes | varlong timestamp_delta | varint offset_delta |
varint key_length | key | varint value_length | value | headers``).  The cleaner adds
one thing, Kafka's KIP-534 *delete horizon*: attributes bit 6 (``0x40``) set means
``base_timestamp`` holds the time after which the batch's tombstones may be dropped, and
the records' timestamp deltas are relative to it (absolute timestamps unchanged).

:class:`BatchFilter` decides, for one batch below the end of the offset map, which
records stay (see :mod:`storage.cleaner` for the rules) and builds the replacement.
Transactions (:mod:`storage.cleaner.txn_filter` follows them): a batch of an aborted
transaction goes whole; a committed transactional batch is compacted like any other;
a marker (control batch) whose transaction has no kept batch is stamped with a delete
horizon like a tombstone's, and dropped by a pass at or after it, unless it may be its
producer's last batch (then it stays as it is).  Every batch walked is reported to the
:class:`~storage.cleaner.txn_filter.TxnFilter`, also those at or above ``map_end``:

==========================  ===============================================================
outcome                     bytes written
==========================  ===============================================================
nothing dropped, no stamp   the batch as read (byte for byte)
some records dropped        same base_offset, last_offset_delta, leader epoch, producer
                            id/epoch/base sequence; new record_count, batch_length,
                            max_timestamp (max of kept records; LogAppendTime keeps its
                            own), CRC; kept records copied byte for byte
first tombstone kept        as above plus bit 6 and base_timestamp = now +
                            delete_retention_ms; each kept record re-encoded with its
                            timestamp delta against that horizon
all records dropped         nothing, or an empty header (record_count 0, same offsets and
                            producer fields; a transactional batch's: plain, no producer)
                            when it is its producer's last batch
aborted transactional       nothing (its ABORT marker follows: never its producer's last)
removable marker            stamped as above (its one record re-encoded), then nothing
==========================  ===============================================================

A compressed batch is decided on its decompressed records (:func:`plain_batch`); a
rewrite is compressed again with the batch's codec, an unchanged batch is kept as read.

Costs: O(records) Python per batch (one tuple per record; 1- and 2-byte varints are
decoded inline, which is what almost every field of a small record is; the value length
is only tested for its sign, bit 0 of its first byte, the CRC having vouched for it) plus a CRC-32C
of the rewritten bytes.  Pure functions and a per-pass object: not shared between
threads.
"""

from __future__ import annotations

from dataclasses import dataclass

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    assemble_batch,
)
from clients.records.compression import compress_batch, decompress_batch
from clients.records.control import CONTROL_KEY
from clients.records.varint import decode_varint, decode_varint32, encode_varint
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.txn_filter import TxnFilter
from storage.index.time_index import NO_TIMESTAMP
from storage.segment import Segment

DELETE_HORIZON_MASK = 0x40
KEPT_AS_IS = CONTROL_MASK | TRANSACTIONAL_MASK  # cleared on an emptied batch's header
# base, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count
Header = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]
# start, end, attributes position, timestamp-delta end, timestamp delta, offset,
# key (None: no key), is a tombstone
RecordSpan = tuple[int, int, int, int, int, int, bytes | None, bool]


def walk_records(raw: bytes, pos: int, h: Header) -> list[RecordSpan]:
    """Every record of the batch at ``pos`` of ``raw`` (header ``h``), as spans."""
    out: list[RecordSpan] = []
    base = h[0]
    end = pos + h[1] + LOG_OVERHEAD
    p = pos + HEADER_SIZE
    dv32, dv = decode_varint32, decode_varint
    try:
        for _ in range(h[12]):
            start = p
            b = raw[p]
            if b < 0x80:
                length, p = (b >> 1) ^ -(b & 1), p + 1
            elif raw[p + 1] < 0x80:
                v = (b & 0x7F) | (raw[p + 1] << 7)
                length, p = (v >> 1) ^ -(v & 1), p + 2
            else:
                length, p = dv32(raw, p)
            rec_end = p + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(f"record length {length} runs past the batch at "
                                         f"offset {base}")
            attr_at = p
            b = raw[p + 1]
            if b < 0x80:
                ts_delta, p = (b >> 1) ^ -(b & 1), p + 2
            elif raw[p + 2] < 0x80:
                v = (b & 0x7F) | (raw[p + 2] << 7)
                ts_delta, p = (v >> 1) ^ -(v & 1), p + 3
            else:
                ts_delta, p = dv(raw, p + 1)
            ts_end = p
            b = raw[p]
            if b < 0x80:
                off_delta, p = (b >> 1) ^ -(b & 1), p + 1
            elif raw[p + 1] < 0x80:
                v = (b & 0x7F) | (raw[p + 1] << 7)
                off_delta, p = (v >> 1) ^ -(v & 1), p + 2
            else:
                off_delta, p = dv32(raw, p)
            b = raw[p]
            if b < 0x80:
                key_len, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                key_len, p = dv32(raw, p)
            key: bytes | None = None
            if key_len >= 0:
                key, p = raw[p:p + key_len], p + key_len
            elif key_len != -1:
                raise CorruptRecordError(f"invalid key length {key_len} at offset {base}")
            # zig-zag: a value length is negative (-1: null) iff bit 0 of its first byte is set
            tombstone = bool(raw[p] & 1)
            if p >= rec_end:
                raise CorruptRecordError(f"record fields run past the record at offset {base}")
            out.append((start, rec_end, attr_at, ts_end, ts_delta, base + off_delta, key,
                        tombstone))
            p = rec_end
    except IndexError:
        raise CorruptRecordError(f"a record runs past the batch at offset {base}") from None
    return out


def plain_batch(raw: bytes, pos: int, h: Header) -> tuple[bytes, int, Header]:
    """The batch at ``pos`` with its records uncompressed: ``(buffer, position, header)``;
    ``raw`` itself when the batch is not compressed (nothing copied)."""
    if not h[5] & COMPRESSION_MASK:
        return raw, pos, h
    plain = decompress_batch(raw, pos, validate=False)
    return plain, 0, HEADER.unpack_from(plain, 0)


def keys_of(data: bytes, pos: int, h: Header) -> tuple[list[bytes], list[int]]:
    """Keys and offsets of the keyed records of the batch at ``pos`` (none for a control
    batch; the caller leaves out aborted transactional batches: an aborted record must
    never supersede a key)."""
    keys: list[bytes] = []
    offsets: list[int] = []
    if not h[5] & CONTROL_MASK:
        data, pos, h = plain_batch(data, pos, h)
        for span in walk_records(data, pos, h):
            if span[6] is not None:
                keys.append(span[6])
                offsets.append(span[5])
    return keys, offsets


def read_batches(seg: Segment, pos: int, budget: int
                 ) -> tuple[bytes, int, list[tuple[int, Header]]]:
    """Whole batches of ``seg`` from ``pos``: about ``budget`` bytes, at least one batch.

    Returns ``(data, bytes used, [(position in data, header), ...])``.
    """
    want = min(max(budget, HEADER_SIZE), seg.size - pos)
    data = seg.read_bytes(pos, want)
    headers: list[tuple[int, Header]] = []
    rel = 0
    unpack = HEADER.unpack_from
    while rel + HEADER_SIZE <= len(data):
        h: Header = unpack(data, rel)
        size = h[1] + LOG_OVERHEAD
        if h[3] != 2 or size < HEADER_SIZE:
            raise CorruptRecordError(f"{seg.log_path}: no batch header at position {pos + rel}")
        if rel + size > len(data):
            if not headers:  # one batch larger than the budget: read it whole
                data = seg.read_bytes(pos, size)
                continue
            break
        headers.append((rel, h))
        rel += size
    if not headers:
        raise CorruptRecordError(f"{seg.log_path}: torn batch at position {pos}")
    return data, rel, headers


def rebuild(h: Header, body: bytes | bytearray, count: int, attributes: int,
            base_timestamp: int, max_timestamp: int) -> bytes:
    """A batch with ``h``'s offsets, epoch and producer fields around ``body``."""
    return assemble_batch(
        body, record_count=count, last_offset_delta=h[6], base_timestamp=base_timestamp,
        max_timestamp=max_timestamp, base_offset=h[0], partition_leader_epoch=h[2],
        producer_id=h[9], producer_epoch=h[10], base_sequence=h[11], attributes=attributes)


def empty_batch(h: Header) -> bytes:
    """The header of ``h`` with no records (same offsets, epoch and producer fields; no
    codec: there is nothing to compress).  A control or transactional batch's becomes a
    plain batch of no producer: an empty marker would read as a marker that is not one,
    an empty transactional batch as the start of a transaction (its marker, which
    carries the producer's state on, may go later)."""
    if h[5] & KEPT_AS_IS:
        h = (*h[:9], -1, -1, -1, h[12])
        attrs = h[5] & ~(DELETE_HORIZON_MASK | COMPRESSION_MASK | KEPT_AS_IS)
    else:
        attrs = h[5] & ~(DELETE_HORIZON_MASK | COMPRESSION_MASK)
    return rebuild(h, b"", 0, attrs, h[7], h[8])


def marker_type(raw: bytes, h: Header) -> int | None:
    """The control type (``ControlType`` value) of the control batch ``raw``, None when
    its first record's key is not a control key."""
    plain, pos, ph = plain_batch(raw, 0, h)
    spans = walk_records(plain, pos, ph)
    key = spans[0][6] if spans else None
    if key is None or len(key) < CONTROL_KEY.size:
        return None
    version, kind = CONTROL_KEY.unpack_from(key)
    return int(kind) if version >= 0 else None


@dataclass
class BatchFilter:
    """The per-pass rules: which records of a batch below ``map_end`` survive."""

    offset_map: OffsetMap
    map_end: int
    now_ms: int
    delete_retention_ms: int
    producer_last: dict[int, int]  # producer id -> base offset of its last batch seen
    txn: TxnFilter  # follows the walk from the log start (aborted transactions)
    records_dropped: int = 0
    tombstones_dropped: int = 0
    keyless_dropped: int = 0
    aborted_dropped: int = 0  # records of aborted transactions
    markers_dropped: int = 0
    min_horizon: int | None = None  # earliest delete horizon of a batch kept with one
    batches_changed: int = 0

    def filter(self, raw: bytes, h: Header) -> bytes | None:
        """What to write for the batch ``raw`` (``h``): ``raw`` itself, a rewrite, or None.

        Every batch of the walk comes here in offset order (the transaction filter
        follows it).  A compressed batch is decided on its uncompressed records; a
        rewrite of it is compressed again with the same codec (as Kafka's cleaner does)."""
        attrs, pid = h[5], h[9]
        if attrs & CONTROL_MASK:
            return self._filter_marker(raw, h)
        if attrs & TRANSACTIONAL_MASK and self.txn.is_aborted(pid, h[0] + h[6]):
            if h[0] < self.map_end:
                self.records_dropped += h[12]
                self.aborted_dropped += h[12]
                self.batches_changed += 1
                return None
            self.txn.kept(pid)
            return raw
        out = self._filter_data(raw, h)
        if (out is not None and attrs & TRANSACTIONAL_MASK
                and (h if out is raw else HEADER.unpack_from(out, 0))[12]):
            self.txn.kept(pid)  # (an empty header is no data of its transaction)
        return out

    def _note_horizon(self, horizon: int) -> None:
        self.min_horizon = horizon if self.min_horizon is None else min(self.min_horizon,
                                                                         horizon)

    def _filter_marker(self, raw: bytes, h: Header) -> bytes | None:
        pid = h[9]
        removable = self.txn.end(pid, h[0], marker_type(raw, h))
        if (not removable or h[0] >= self.map_end
                or self.producer_last.get(pid, h[0]) <= h[0]):
            return raw  # data of its transaction stays, or it may be its producer's last
        if h[5] & DELETE_HORIZON_MASK:
            if self.now_ms >= h[7]:
                self.markers_dropped += 1
                self.batches_changed += 1
                return None
            self._note_horizon(h[7])
            return raw
        horizon = self.now_ms + self.delete_retention_ms
        self._note_horizon(horizon)
        self.batches_changed += 1
        plain, _, ph = plain_batch(raw, 0, h)  # (a compressed one is written uncompressed)
        return self._rewrite(plain, ph, walk_records(plain, 0, ph),
                             (ph[5] | DELETE_HORIZON_MASK) & ~COMPRESSION_MASK, horizon)

    def _filter_data(self, raw: bytes, h: Header) -> bytes | None:
        if h[0] >= self.map_end:
            return raw
        codec = h[5] & COMPRESSION_MASK
        if not codec:
            return self._filter_plain(raw, h)
        plain, _, ph = plain_batch(raw, 0, h)
        out = self._filter_plain(plain, ph)
        if out is plain:
            return raw
        if out is None or HEADER.unpack_from(out, 0)[12] == 0:
            return out  # dropped, or its producer's empty last batch (no records to pack)
        return compress_batch(out, codec)

    def _filter_plain(self, raw: bytes, h: Header) -> bytes | None:
        has_horizon = bool(h[5] & DELETE_HORIZON_MASK)
        expired = has_horizon and self.now_ms >= h[7]
        latest = self.offset_map.get
        kept: list[RecordSpan] = []
        tombstones = 0
        spans = walk_records(raw, 0, h)
        for span in spans:
            key = span[6]
            if key is None:
                self.keyless_dropped += 1
                continue
            newer = latest(key)
            if newer is not None and newer > span[5]:
                continue
            if span[7]:
                if expired:
                    self.tombstones_dropped += 1
                    continue
                tombstones += 1
            kept.append(span)
        self.records_dropped += len(spans) - len(kept)
        stamp = tombstones > 0 and not has_horizon
        attrs, base_ts = h[5], h[7]
        if stamp:
            attrs, base_ts = attrs | DELETE_HORIZON_MASK, self.now_ms + self.delete_retention_ms
        if tombstones and attrs & DELETE_HORIZON_MASK:
            self._note_horizon(base_ts)
        if len(kept) == len(spans) and not stamp:
            return raw
        self.batches_changed += 1
        if not kept:
            pid = h[9]
            if pid >= 0 and self.producer_last.get(pid, h[0]) <= h[0]:
                return empty_batch(h)  # its producer's last batch: keep the header
            return None
        return self._rewrite(raw, h, kept, attrs, base_ts)

    @staticmethod
    def _rewrite(raw: bytes, h: Header, kept: list[RecordSpan], attrs: int,
                 base_ts: int) -> bytes:
        body = bytearray()
        old_base_ts = h[7]
        max_ts = NO_TIMESTAMP
        for start, end, attr_at, ts_end, ts_delta, _off, _key, _tomb in kept:
            ts = old_base_ts + ts_delta
            if ts > max_ts:
                max_ts = ts
            if base_ts == old_base_ts:
                body += raw[start:end]
            else:  # re-encode the timestamp delta against the delete horizon
                rec = bytearray(raw[attr_at:attr_at + 1])
                encode_varint(ts - base_ts, rec)
                rec += raw[ts_end:end]
                encode_varint(len(rec), body)
                body += rec
        if h[5] & TIMESTAMP_TYPE_MASK:
            max_ts = h[8]
        return rebuild(h, body, len(kept), attrs, base_ts, max_ts)
