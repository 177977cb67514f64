"""A leader append parses each batch header once (issue 31).

The Produce handler's record check (:func:`storage.log.validator.validate_append_batches`)
unpacks every batch header; the producer-state check and the log's append then read
what it unpacked instead of walking the batches again.  Counted by wrapping
``HEADER`` (the 61-byte header struct) in every module that unpacks it on that path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import broker.handlers.produce
import clients.records.batch
import storage.log.validator
from clients.protocol.api_keys import ApiKey
from clients.records.batch import HEADER
from clients.records.record import build_batch
from tests.broker.handlers.wire import CoreHarness, call1, core_at

BATCHES = 5


class CountingHeader:
    """``HEADER`` with its ``unpack_from`` calls counted."""

    def __init__(self, real: struct.Struct) -> None:
        self.real = real
        self.size = real.size
        self.unpacks = 0

    def unpack_from(self, buffer: Any, offset: int = 0) -> tuple[Any, ...]:
        self.unpacks += 1
        return self.real.unpack_from(buffer, offset)

    def pack(self, *values: Any) -> bytes:
        return self.real.pack(*values)

    def pack_into(self, buffer: Any, offset: int, *values: Any) -> None:
        self.real.pack_into(buffer, offset, *values)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path / "b0") as harness:
        harness.create("t", 1)
        yield harness


def _records(producer_id: int = -1) -> bytes:
    return b"".join(build_batch([(b"k%d" % i, b"v" * 100, 1_000_000, ())],
                                producer_id=producer_id,
                                producer_epoch=0 if producer_id >= 0 else -1,
                                base_sequence=i if producer_id >= 0 else -1)
                    for i in range(BATCHES))


@pytest.mark.parametrize("producer_id", [-1, 7])
def test_a_leader_append_parses_each_batch_header_once(
        h: CoreHarness, monkeypatch: pytest.MonkeyPatch, producer_id: int) -> None:
    records = _records(producer_id)
    counter = CountingHeader(HEADER)
    for module in (storage.log.validator, clients.records.batch, broker.handlers.produce):
        monkeypatch.setattr(module, "HEADER", counter)
    answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
        {"name": "t", "partitions": [{"index": 0, "records": records}]}]})
    result = answer["responses"][0]["partition_responses"][0]
    assert result["error_code"] == 0 and result["base_offset"] == 0
    assert h.core.partitions[("t", 0)].log_end_offset == BATCHES  # type: ignore[index]
    assert counter.unpacks == BATCHES
