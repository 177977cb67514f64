"""Shared hypothesis strategies and helpers for the record batch codec tests."""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import strategies as st

from clients.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET
from clients.records.record import Header, Record

nullable_bytes = st.none() | st.binary(max_size=300)
timestamps = st.integers(min_value=-(1 << 50), max_value=1 << 50)
header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20))
record_inputs = st.lists(
    st.tuples(nullable_bytes, nullable_bytes, timestamps, st.lists(header, max_size=3)),
    min_size=1,
    max_size=40,
)
no_headers: st.SearchStrategy[list[Header]] = st.just([])
plain_record_inputs = st.lists(
    st.tuples(nullable_bytes, nullable_bytes, timestamps, no_headers), min_size=1, max_size=60
)


def fix_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the CRC of the batch at ``pos`` after a deliberate mutation."""
    (length,) = struct.unpack_from(">i", buf, pos + 8)
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + 12 + length])
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc)


def expected_records(items: list, base_offset: int = 0) -> list[Record]:
    """What decoding a batch built from ``items`` must give back."""
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (key, value, ts, headers) in enumerate(items)
    ]
