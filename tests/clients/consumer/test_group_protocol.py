from __future__ import annotations

import contextlib

import msgpack
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


def test_layout_is_the_documented_array() -> None:
    raw = encode_subscription(Subscription(("b", "a"), (TopicPartition("a", 1),), b"u", 3))
    assert msgpack.unpackb(raw) == [0, ["a", "b"], [["a", [1]]], b"u", 3]
    raw = encode_assignment(Assignment((TopicPartition("x", 2), TopicPartition("x", 0))))
    assert msgpack.unpackb(raw) == [0, [["x", [0, 2]]], None]


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment(())


def test_newer_version_with_extra_fields_decodes() -> None:
    raw = msgpack.packb([3, ["t"], [], None, 7, "future field"])
    assert decode_subscription(raw) == Subscription(("t",), (), None, 7)
    raw = msgpack.packb([1, [["t", [0]]], None, {"x": 1}])
    assert decode_assignment(raw).partitions == (TopicPartition("t", 0),)


@pytest.mark.parametrize("raw, message", [
    (b"\xc1", "not msgpack"),
    (msgpack.packb({"a": 1}), "expected an array"),
    (msgpack.packb([0, ["t"]]), "at least 5 fields"),
    (msgpack.packb([-1, ["t"], [], None, -1]), "version"),
    (msgpack.packb([0, "t", [], None, -1]), "topics"),
    (msgpack.packb([0, [""], [], None, -1]), "topics"),
    (msgpack.packb([0, ["t"], [["t", [-1]]], None, -1]), "bad partition"),
    (msgpack.packb([0, ["t"], [["t", [0, 0]]], None, -1]), "listed twice"),
    (msgpack.packb([0, ["t"], [["t"]], None, -1]), "bad entry"),
    (msgpack.packb([0, ["t"], [], "text", -1]), "user_data"),
    (msgpack.packb([0, ["t"], [], None, -2]), "generation_id"),
    (msgpack.packb([0, ["t"], [], None, True]), "generation_id"),
])  # fmt: skip
def test_bad_subscription_is_a_precise_error(raw: bytes, message: str) -> None:
    with pytest.raises(GroupProtocolError, match=message):
        decode_subscription(raw)


@pytest.mark.parametrize("raw, message", [
    (b"\x92\x00", "not msgpack"),  # truncated array
    (msgpack.packb([0]), "at least 3 fields"),
    (msgpack.packb([0, [["t", ["x"]]], None]), "bad partition"),
    (msgpack.packb([0, {"t": [0]}, None]), "expected an array"),
    (msgpack.packb(["v", [], None]), "version"),
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
