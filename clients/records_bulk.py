"""Bulk RecordBatch v2 codec: many records encoded or decoded at once with numpy.

Same bytes as the per-record path in :mod:`clients.records` (batch header table in
:mod:`clients.records_batch`, record table in :mod:`clients.records_codec`).  The codec
is split by direction; this module re-exports their public names:

- :mod:`clients.records_bulk_encode`: :func:`encode_batch_bulk`,
  :func:`encode_batch_bulk_into`, :func:`batch_size_bound`, :func:`item_lengths`
  (header-less records; uniform-layout runs or one scattered "glue" buffer);
- :mod:`clients.records_bulk_decode`: :func:`decode_batch_bulk` into
  :class:`BulkRecords` (layout runs verified on 2-D views, or a general vectorised
  path; any record, headers included; values never copied);
- :mod:`clients.records_bulk_varint`: the vectorised zig-zag varints both use.

Costs: O(records + record bytes) with a small constant number of numpy calls per field.
Thread/process safety: functions are pure and thread-safe; a :class:`BulkRecords` keeps
the buffer it was decoded from exported while it or its views are alive.
"""

from __future__ import annotations

from clients.records_bulk_decode import MIN_RECORD_BYTES, MIN_RUN, BulkRecords, decode_batch_bulk
from clients.records_bulk_encode import (
    MAX_BOUNDED_RECORDS,
    BytesInput,
    batch_size_bound,
    encode_batch_bulk,
    encode_batch_bulk_into,
    item_lengths,
)
from clients.records_bulk_varint import I64, MAX_RUNS, U8, U64

__all__ = [
    "I64",
    "MAX_BOUNDED_RECORDS",
    "MAX_RUNS",
    "MIN_RECORD_BYTES",
    "MIN_RUN",
    "U8",
    "U64",
    "BulkRecords",
    "BytesInput",
    "batch_size_bound",
    "decode_batch_bulk",
    "encode_batch_bulk",
    "encode_batch_bulk_into",
    "item_lengths",
]
