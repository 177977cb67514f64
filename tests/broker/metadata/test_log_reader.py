"""MetadataLogReader: the metadata follower's rules, fed answers directly (no sockets)."""

from __future__ import annotations

import pytest

from broker.controller.quorum.entry_batches import entries_to_batches
from broker.metadata.log_reader import MetadataLogReader
from broker.metadata.records import (
    MetadataRecord,
    MetadataRecordError,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    encode_record,
)
from clients.records.record import build_batch
from replication.raft.messages import Entry
from replication.raft.replica import LEADER_CHANGE

LOG: list[MetadataRecord] = [
    RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001), UnfenceBrokerRecord(1, 0),
    TopicRecord("t", 1, 1, 1), TopicRecord("u", 2, 1, 1)]


def answer(start: int, end: int, base: int | None = None) -> bytes:
    """Records ``LOG[start:end]`` in one batch at offsets from ``base`` (default start)."""
    return build_batch([(None, encode_record(r), 0, ()) for r in LOG[start:end]],
                       base_offset=start if base is None else base)


def test_the_image_is_acted_on_only_at_the_high_watermark() -> None:
    reader = MetadataLogReader()
    assert reader.fetch_offset == 0
    assert reader.on_answer(answer(0, 2), high_watermark=4) is False  # partial
    assert reader.fetch_offset == 2 and not reader.at_high_watermark
    assert reader.on_answer(answer(0, 4), high_watermark=4) is True  # 0-1 skipped
    assert set(reader.image.topics) == {"t", "u"} and reader.at_high_watermark
    assert reader.on_answer(b"", high_watermark=4) is False  # nothing new
    assert reader.on_answer(None, high_watermark=4) is False


def test_an_answer_with_a_gap_is_refused_whole() -> None:
    reader = MetadataLogReader()
    reader.on_answer(answer(0, 1), high_watermark=4)
    with pytest.raises(MetadataRecordError, match="offset 2 where 1 was next"):
        reader.on_answer(answer(2, 4), high_watermark=4)
    assert reader.fetch_offset == 1 and reader.image.topics == {}
    assert reader.on_answer(answer(1, 4), high_watermark=4) is True


def test_out_of_range_rebuilds_a_new_image_acted_on_when_complete() -> None:
    reader = MetadataLogReader()
    reader.on_answer(answer(0, 4), high_watermark=4)
    old = reader.image
    reader.on_out_of_range()
    assert reader.image is not old and reader.fetch_offset == 0
    assert reader.on_answer(answer(0, 2), high_watermark=4) is False
    assert reader.on_answer(answer(2, 4), high_watermark=4) is True
    assert set(reader.image.topics) == {"t", "u"}


def test_a_quorum_leader_change_control_record_takes_its_offset() -> None:
    """A controller quorum's log holds LeaderChange control records between metadata
    records: the reader counts them (the next record is contiguous) and reaches the HW."""
    control = entries_to_batches(2, [Entry(1, LEADER_CHANGE)], 0)
    reader = MetadataLogReader()
    assert reader.on_answer(answer(0, 2) + control + answer(2, 4, base=3),
                            high_watermark=5) is True
    assert reader.fetch_offset == 5 and set(reader.image.topics) == {"t", "u"}
    assert reader.on_answer(control, high_watermark=5) is False  # already applied: skipped
    at_end = MetadataLogReader()
    assert at_end.on_answer(answer(0, 2) + control, high_watermark=3) is True
    assert at_end.fetch_offset == 3 and at_end.at_high_watermark
