"""storage.records.walk.header_fields walks and fails as iter_batches(validate=False)."""

from __future__ import annotations

import pytest

from clients.protocol.errors import CorruptRecordError
from clients.records.batch import BatchHeader, iter_batches
from clients.records.record import build_batch
from storage.records.walk import PRODUCER_ID_FIELD, header_fields


def _run() -> bytes:
    return b"".join(build_batch([(None, b"v" * (10 + i), 100 + i, ())] * (1 + i % 3),
                                base_offset=7 * i) for i in range(6))


def test_the_fields_are_the_headers_iter_batches_reads() -> None:
    data = _run()
    walked = [(pos, BatchHeader(*fields)) for pos, fields in header_fields(data)]
    assert walked == list(iter_batches(data, validate=False))
    assert len(walked) == 6
    assert all(f[PRODUCER_ID_FIELD] == h.producer_id for (_, f), (_, h)
               in zip(header_fields(data), walked, strict=True))


@pytest.mark.parametrize("damage", ["short", "magic", "length", "partial"])
def test_a_bad_batch_raises_the_codec_error_after_the_good_ones(damage: str) -> None:
    data = bytearray(_run())
    second = next(iter(p for p, _ in iter_batches(bytes(data), validate=False) if p))
    if damage == "short":
        data = data[: second + 20]
    elif damage == "magic":
        data[second + 16] = 9
    elif damage == "length":
        data[second + 8 : second + 12] = (3).to_bytes(4, "big")
    else:
        data = data[: second + 70]  # a whole header, not the whole batch
    expected = []
    with pytest.raises(CorruptRecordError) as codec:
        for pos, _ in iter_batches(bytes(data), validate=False):
            expected.append(pos)
    got = []
    with pytest.raises(CorruptRecordError) as walk:
        for pos, _ in header_fields(bytes(data)):
            got.append(pos)
    assert got == expected == [0]
    assert str(walk.value) == str(codec.value)
