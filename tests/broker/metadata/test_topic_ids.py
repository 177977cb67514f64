"""Topic ids in Kafka's format: the id itself, the metadata records and image that carry
it, the controller that draws it (and upgrades a log written before ids), the
``partition.metadata`` file and the replica-plan decisions that compare it."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.controller.config import ControllerConfig
from broker.controller.results import ReplicaLog, TopicSpec
from broker.controller.state import ControllerState
from broker.metadata.image import MetadataImage, TopicInfo
from broker.metadata.records import (
    AssignTopicIdRecord,
    MetadataRecord,
    MetadataRecordError,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    decode_record,
    encode_record,
)
from broker.metadata.replica_plan import log_of_other_topic, partition_metadata_label
from clients.protocol import topics
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import (
    METADATA_TOPIC_ID,
    ZERO_UUID,
    new_topic_id,
    parse_topic_id,
    topic_id_str,
)
from storage.partition_metadata import PARTITION_METADATA, read_topic_id, write_topic_id
from timer.clock import ManualClock

A, B = bytes(range(16)), bytes(range(16, 32))


# -- the id ------------------------------------------------------------------------------


def test_the_text_form_is_kafkas_url_safe_base64_without_padding() -> None:
    assert topic_id_str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID
    assert topic_id_str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert topic_id_str(b"\xfb\xff" + bytes(14)) == "-_8AAAAAAAAAAAAAAAAAAA"  # URL-safe
    assert parse_topic_id(topic_id_str(A)) == A
    for bad in ("", "AAAA", "AAAAAAAAAAAAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAA!",
                "AAAAAAAAAAAAAAAAAAAAAB"):  # the last one has bits beyond the 16 bytes
        with pytest.raises(ValueError):
            parse_topic_id(bad)


def test_a_new_id_is_never_a_reserved_one(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter([ZERO_UUID, METADATA_TOPIC_ID, A])
    monkeypatch.setattr(topics.os, "urandom", lambda n: next(drawn))
    assert new_topic_id() == A


# -- records and image -------------------------------------------------------------------


def test_topic_records_carry_the_id_and_old_ones_decode_without_it() -> None:
    record = TopicRecord("t", 7, 2, 1, {}, A)
    assert decode_record(encode_record(record)) == record
    old = TopicRecord("t", 7, 2, 1)  # written before ids: no topic_uuid key at all
    assert b"topic_uuid" not in encode_record(old)
    assert decode_record(encode_record(old)).topic_uuid == ZERO_UUID
    assert decode_record(encode_record(AssignTopicIdRecord("t", B))) == \
        AssignTopicIdRecord("t", B)
    for bad in (b"short", METADATA_TOPIC_ID):
        with pytest.raises(MetadataRecordError):
            TopicRecord("t", 7, 2, 1, {}, bad)
    with pytest.raises(MetadataRecordError):
        AssignTopicIdRecord("t", ZERO_UUID)


def _image(*records: MetadataRecord) -> MetadataImage:
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(record, offset)
    return image


def test_the_image_indexes_ids_and_refuses_a_second_id_or_a_taken_one() -> None:
    image = _image(TopicRecord("t", 0, 1, 1, {}, A), TopicRecord("old", 1, 1, 1))
    assert image.topic_by_id(A) is image.topics["t"]
    assert image.topic_by_id(ZERO_UUID) is None and image.topics["old"].topic_uuid == ZERO_UUID
    with pytest.raises(MetadataRecordError):  # taken by t
        image.apply(AssignTopicIdRecord("old", A), 2)
    with pytest.raises(MetadataRecordError):
        image.apply(TopicRecord("u", 2, 1, 1, {}, A), 2)
    with pytest.raises(MetadataRecordError):  # t has one already
        image.apply(AssignTopicIdRecord("t", B), 2)
    image.apply(AssignTopicIdRecord("old", B), 2)
    assert image.topic_by_id(B) is image.topics["old"]
    image.apply(RemoveTopicRecord("t"), 3)
    assert image.topic_by_id(A) is None
    image.apply(PartitionRecord("old", 0, (1,), -1, 0, (1,), 0), 4)
    again = MetadataImage.decode_snapshot(image.encode_snapshot())
    assert again == image and again.topic_by_id(B) is again.topics["old"]


# -- the controller ----------------------------------------------------------------------


def _controller(image: MetadataImage | None = None) -> ControllerState:
    return ControllerState(ControllerConfig().validate(), ManualClock(1_000), image)


def test_the_controller_draws_a_random_id_per_created_topic() -> None:
    state = _controller(_image(RegisterBrokerRecord(1, 0, "a", "h", 1),
                               UnfenceBrokerRecord(1, 0)))
    results, records = state.create_topics([TopicSpec("t", 2, 1), TopicSpec("u", 1, 1)])
    ids = [r.topic_uuid for r in results]
    assert len(set(ids)) == 2 and ZERO_UUID not in ids
    assert [r.topic_uuid for r in records if isinstance(r, TopicRecord)] == ids
    assert state.image.topics["t"].topic_uuid == ids[0]
    (dry,), none = state.create_topics([TopicSpec("v", 1, 1)], validate_only=True)
    assert dry.topic_uuid == ZERO_UUID and none == []


def test_the_active_controller_upgrades_an_old_log_once_at_its_first_tick() -> None:
    old_log: list[MetadataRecord] = [
        RegisterBrokerRecord(1, 0, "a", "h", 1), UnfenceBrokerRecord(1, 0),
        TopicRecord("a", 2, 1, 1), PartitionRecord("a", 0, (1,), 1, 2, (1,), 0),
        TopicRecord("b", 4, 1, 1), PartitionRecord("b", 0, (1,), 1, 4, (1,), 0)]
    state = _controller(_image(*old_log))
    written = [r for r in state.tick() if isinstance(r, AssignTopicIdRecord)]
    assert [r.name for r in written] == ["a", "b"]
    assert {state.image.topics[r.name].topic_uuid for r in written} == \
        {r.topic_uuid for r in written}
    # a restarted controller reads the ids back from the log and writes none again
    again = _controller(_image(*old_log, *written))
    assert not [r for r in again.tick() if isinstance(r, AssignTopicIdRecord)]
    assert again.image.topics["a"].topic_uuid == written[0].topic_uuid


def test_delete_by_id() -> None:
    state = _controller(_image(RegisterBrokerRecord(1, 0, "a", "h", 1),
                               UnfenceBrokerRecord(1, 0)))
    (created,), _ = state.create_topics([TopicSpec("t", 1, 1)])
    (unknown, by_name_unknown), records = state.delete_topics([B, "nope"])
    assert (unknown.error, unknown.topic_uuid) == (ErrorCode.UNKNOWN_TOPIC_ID, B)
    assert by_name_unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and records == []
    (deleted,), records = state.delete_topics([created.topic_uuid])
    assert (deleted.name, deleted.error, deleted.topic_uuid) == ("t", ErrorCode.NONE,
                                                                created.topic_uuid)
    assert records == [RemoveTopicRecord("t")] and "t" not in state.image.topics


def test_a_report_of_a_log_labelled_with_another_topics_id_does_not_count() -> None:
    assert ReplicaLog("t", 0, topic_uuid=A).recorded_topic_id == A
    assert ReplicaLog("t", 0, created_offset=3).recorded_topic_id == 3
    assert ReplicaLog("t", 0).recorded_topic_id is None


# -- partition.metadata and the decisions on it ----------------------------------------


def test_partition_metadata_is_kafkas_file_and_reads_our_old_one(tmp_path: Path) -> None:
    write_topic_id(tmp_path, A)
    assert (tmp_path / PARTITION_METADATA).read_text() == \
        f"version: 0\ntopic_id: {topic_id_str(A)}\n"
    assert read_topic_id(tmp_path) == A
    (tmp_path / PARTITION_METADATA).write_text("version: 0\ntopic_id: 12\n")  # ours, old
    assert read_topic_id(tmp_path) == 12
    for damaged in ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n",  # the zero id
                    "version: 0\ntopic_id: not-an-id\n", "version: 1\ntopic_id: 12\n"):
        (tmp_path / PARTITION_METADATA).write_text(damaged)
        assert read_topic_id(tmp_path) is None


def test_a_directory_is_another_topics_when_its_id_differs_in_either_form() -> None:
    def topic(uuid: bytes = ZERO_UUID) -> TopicInfo:
        return TopicInfo("t", 5, 1, 1, {}, topic_uuid=uuid)

    assert log_of_other_topic(A, topic(B)) and not log_of_other_topic(A, topic(A))
    assert log_of_other_topic(4, topic(A)) and not log_of_other_topic(5, topic(A))  # an old file
    assert not log_of_other_topic(A, topic())  # the topic has no id yet: cannot tell, adopted
    assert not log_of_other_topic(None, topic(A))
    assert partition_metadata_label(topic(A)) == A and partition_metadata_label(topic()) == 5
