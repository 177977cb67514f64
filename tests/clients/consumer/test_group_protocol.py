from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.consumer.group_protocol import (
    Assignment,
    GroupProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from clients.protocol.topics import TopicPartition

topics = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=8)
partitions = st.frozensets(st.builds(TopicPartition, topics, st.integers(0, 1000)), max_size=20)
user_data = st.one_of(st.none(), st.binary(max_size=32))


@settings(max_examples=100, deadline=None)
@given(st.lists(topics, max_size=10), partitions, user_data, st.integers(-1, 2**31 - 1))
def test_subscription_round_trip(names: list[str], owned: frozenset[TopicPartition],
                                 data: bytes | None, generation: int) -> None:
    sub = Subscription(tuple(names), tuple(owned), data, generation)
    back = decode_subscription(encode_subscription(sub))
    assert back.topics == tuple(sorted(set(names)))
    assert set(back.owned_partitions) == owned
    assert len(back.owned_partitions) == len(owned)
    assert (back.user_data, back.generation_id) == (data, generation)


@settings(max_examples=100, deadline=None)
@given(partitions, user_data)
def test_assignment_round_trip(assigned: frozenset[TopicPartition], data: bytes | None) -> None:
    back = decode_assignment(encode_assignment(Assignment(tuple(assigned), data)))
    assert set(back.partitions) == assigned and len(back.partitions) == len(assigned)
    assert back.partitions == tuple(sorted(assigned))  # grouped by topic, sorted
    assert back.user_data == data


def test_layout_is_kafkas_consumer_protocol() -> None:
    raw = encode_subscription(Subscription(("b", "a"), (TopicPartition("a", 1),), b"u", 3))
    assert raw == bytes.fromhex(
        "0003"  # version 3
        "00000002" "0001" "61" "0001" "62"  # topics ["a", "b"]
        "00000001" "75"  # user_data b"u"
        "00000001" "0001" "61" "00000001" "00000001"  # owned [{a, [1]}]
        "00000003"  # generation 3
        "ffff"  # rack null
    )
    raw = encode_assignment(Assignment((TopicPartition("x", 2), TopicPartition("x", 0))))
    assert raw == bytes.fromhex("0000" "00000001" "0001" "78" "00000002" "00000000" "00000002"
                                "ffffffff")


def test_kafka_python_reads_ours_and_we_read_theirs() -> None:
    metadata = pytest.importorskip("kafka.protocol.consumer.metadata",
                                   reason="kafka-python is the oracle")
    sub_cls, asg_cls = metadata.ConsumerProtocolSubscription, metadata.ConsumerProtocolAssignment
    ours = Subscription(("t", "u"), (TopicPartition("t", 0), TopicPartition("u", 3)), b"x", 5)
    theirs = sub_cls.decode(encode_subscription(ours))
    assert (theirs.topics, theirs.user_data, theirs.generation_id) == (["t", "u"], b"x", 5)
    assert [(tp.topic, tp.partitions) for tp in theirs.owned_partitions] == [("t", [0]),
                                                                              ("u", [3])]
    for version in range(4):  # every version a Kafka client may send
        raw = sub_cls(version=version, topics=["t"], user_data=None,
                      owned_partitions=[sub_cls.TopicPartition(topic="t", partitions=[1])],
                      generation_id=2, rack_id="r").encode()  # fmt: skip
        back = decode_subscription(raw)
        assert back.topics == ("t",)
        assert back.owned_partitions == (() if version < 1 else (TopicPartition("t", 1),))
        assert back.generation_id == (-1 if version < 2 else 2)
    assignment = Assignment((TopicPartition("t", 1), TopicPartition("t", 0)), b"ud")
    decoded = asg_cls.decode(encode_assignment(assignment))
    assert [(tp.topic, tp.partitions) for tp in decoded.assigned_partitions] == [("t", [0, 1])]
    assert decoded.user_data == b"ud"
    for version in range(4):
        raw = asg_cls(version=version, user_data=None, assigned_partitions=[
            asg_cls.TopicPartition(topic="t", partitions=[2])]).encode()
        assert decode_assignment(raw).partitions == (TopicPartition("t", 2),)


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment(())


def test_newer_version_with_extra_fields_decodes() -> None:
    raw = bytearray(encode_subscription(Subscription(("t",), (), None, 7)))
    raw[0:2] = b"\x00\x09"  # version 9, with a field we do not know appended
    assert decode_subscription(bytes(raw) + b"\x00\x00\x00\x01") == Subscription(("t",), (),
                                                                                    None, 7)
    raw = bytearray(encode_assignment(Assignment((TopicPartition("t", 0),))))
    raw[0:2] = b"\x00\x05"
    assert decode_assignment(bytes(raw) + b"extra").partitions == (TopicPartition("t", 0),)


def _sub(body: bytes, version: int = 3) -> bytes:
    return version.to_bytes(2, "big", signed=True) + body


TOPICS_T = bytes.fromhex("00000001" "0001" "74")  # ["t"]
NO_USER_DATA = bytes.fromhex("ffffffff")


@pytest.mark.parametrize("raw, message", [
    (b"\x00", "too short"),
    (_sub(b"", -1), "version"),
    (_sub(b"\x00\x00"), "topics"),  # truncated
    (_sub(bytes.fromhex("00000001" "0000") + NO_USER_DATA + bytes(12)), "topics must be"),
    (_sub(TOPICS_T + NO_USER_DATA + bytes.fromhex("00000001" "0001" "74" "00000001" "ffffffff")
          + bytes(6)), "bad partition"),
    (_sub(TOPICS_T + NO_USER_DATA + bytes.fromhex("00000001" "0001" "74" "00000002"
                                                  "00000000" "00000000") + bytes(6)),
     "listed twice"),
    (_sub(TOPICS_T + NO_USER_DATA + bytes(4) + bytes.fromhex("fffffffe") + b"\xff\xff"),
     "generation_id"),
    (_sub(TOPICS_T + bytes.fromhex("fffffffe")), "user_data"),
])  # fmt: skip
def test_bad_subscription_is_a_precise_error(raw: bytes, message: str) -> None:
    with pytest.raises(GroupProtocolError, match=message):
        decode_subscription(raw)


@pytest.mark.parametrize("raw, message", [
    (b"\x00\x00\x00", "assigned_partitions"),  # truncated count
    (b"\x00\x00" + bytes.fromhex("00000001" "0001" "74" "00000001" "ffffffff" "ffffffff"),
     "bad partition"),
    (b"\xff\xff" + bytes(8), "version"),
])  # fmt: skip
def test_bad_assignment_is_a_precise_error(raw: bytes, message: str) -> None:
    with pytest.raises(GroupProtocolError, match=message):
        decode_assignment(raw)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_never_escapes_as_another_exception(raw: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        with contextlib.suppress(GroupProtocolError):
            decode(raw)
