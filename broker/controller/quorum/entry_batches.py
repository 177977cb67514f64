"""Raft entries as Kafka record batches: how the metadata log stores them and how a Fetch
of ``__cluster_metadata``-0 carries them between voters.

An :class:`~replication.raft.messages.Entry` is one record; its ``epoch`` is the batch's
``partition_leader_epoch`` (so a batch holds entries of one epoch).  A data entry is a
plain record (key null, value = the payload: an encoded metadata record).  The replica's
:data:`~replication.raft.replica.LEADER_CHANGE` entry is a *control* record, alone in its
control batch, with Kafka's control key (version 0, type 2 = LEADER_CHANGE) and the
payload as value (Kafka's value is a LeaderChangeMessage; ours names no voters).  Readers
of metadata records skip control batches (:func:`broker.metadata.records.decode_record_batches`).

Timestamps are the appending voter's wall clock: the same entries may carry other
timestamps on another voter (the entries, epochs and offsets are equal; the bytes need not
be).

Costs: O(entries + bytes) both ways, one CRC-32C per batch.  Pure functions: thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import CONTROL_MASK, Buffer, iter_batches
from clients.records.record import build_batch, decode_batch
from replication.raft.messages import Entry
from replication.raft.replica import LEADER_CHANGE

__all__ = ["LEADER_CHANGE_KEY", "batches_to_entries", "entries_to_batches"]

LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)  # Kafka's ControlRecordType.LEADER_CHANGE


def _groups(entries: Sequence[Entry], max_batch_records: int) -> Iterator[list[Entry]]:
    group: list[Entry] = []
    for entry in entries:
        control = entry.payload == LEADER_CHANGE
        if group and (control or group[0].payload == LEADER_CHANGE
                      or group[0].epoch != entry.epoch or len(group) >= max_batch_records):
            yield group
            group = []
        group.append(entry)
    if group:
        yield group


def entries_to_batches(base_offset: int, entries: Sequence[Entry], now_ms: int,
                       max_batch_records: int = 1000) -> bytes:
    """``entries`` from ``base_offset`` as consecutive record batches (b"" for none)."""
    out = []
    offset = base_offset
    for group in _groups(entries, max_batch_records):
        control = group[0].payload == LEADER_CHANGE
        key = LEADER_CHANGE_KEY if control else None
        out.append(build_batch([(key, e.payload, now_ms, ()) for e in group],
                               base_offset=offset, partition_leader_epoch=group[0].epoch,
                               attributes=CONTROL_MASK if control else 0))
        offset += len(group)
    return b"".join(out)


def batches_to_entries(data: Buffer, start_offset: int = 0,
                       max_entries: int | None = None) -> list[tuple[int, Entry]]:
    """``(offset, entry)`` for the records at or after ``start_offset`` of the batches in
    ``data`` (CRC-checked), at most ``max_entries``.  A record without a value, or a
    control record that is not a LeaderChange, raises :class:`CorruptRecordError`."""
    out: list[tuple[int, Entry]] = []
    for pos, header in iter_batches(data):
        if header.next_offset <= start_offset:
            continue
        for record in decode_batch(data, pos):
            if record.offset < start_offset:
                continue
            if max_entries is not None and len(out) >= max_entries:
                return out
            if record.value is None or (header.is_control and record.key != LEADER_CHANGE_KEY):
                raise CorruptRecordError(
                    f"metadata log record at offset {record.offset} is not a raft entry")
            out.append((record.offset, Entry(header.partition_leader_epoch, record.value)))
    return out
