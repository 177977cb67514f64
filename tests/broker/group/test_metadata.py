"""Offsets-topic record formats: round trips, deterministic keys, precise decode errors."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.group.metadata import (
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordError,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

names = st.text(min_size=1, max_size=20)
ints = st.integers(min_value=-1, max_value=2**62)
members = st.builds(MemberMetadata, names, st.none() | names, st.text(max_size=10),
                    st.text(max_size=10), ints, ints, st.binary(max_size=50),
                    st.binary(max_size=50))


@settings(max_examples=50, deadline=None)
@given(names, names, st.integers(min_value=0, max_value=2**31 - 1),
       st.builds(OffsetCommitValue, ints, ints, st.none() | st.text(max_size=30), ints))
def test_offset_commit_round_trip(group: str, topic: str, partition: int,
                                  value: OffsetCommitValue) -> None:
    key = OffsetCommitKey(group, topic, partition)
    raw = encode_offset_commit_key(key)
    assert raw[:2] == struct.pack(">h", 1)
    assert decode_key(raw) == key
    assert raw == encode_offset_commit_key(OffsetCommitKey(group, topic, partition))
    assert decode_offset_commit_value(encode_offset_commit_value(value)) == value


@settings(max_examples=50, deadline=None)
@given(names, st.builds(GroupMetadataValue, st.text(max_size=10), ints, st.none() | names,
                        st.none() | names, ints, st.lists(members, max_size=4).map(tuple)))
def test_group_metadata_round_trip(group: str, value: GroupMetadataValue) -> None:
    raw = encode_group_metadata_key(GroupMetadataKey(group))
    assert raw[:2] == struct.pack(">h", 2) and decode_key(raw) == GroupMetadataKey(group)
    assert decode_group_metadata_value(encode_group_metadata_value(value)) == value


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "no version"),
    (b"\x00\x09" + msgpack.packb(["g"]), "unknown key version 9"),
    (b"\x00\x01\xc1", "not msgpack"),
    (b"\x00\x01" + msgpack.packb({"g": 1}), "not array"),
    (b"\x00\x01" + msgpack.packb(["g", "t"]), "field 2 missing"),
    (b"\x00\x01" + msgpack.packb(["g", "t", "0"]), "field 2 is str"),
])
def test_bad_keys_are_precise_errors(data: bytes, reason: str) -> None:
    with pytest.raises(GroupRecordError, match=reason):
        decode_key(data)


def test_bad_values_are_precise_errors() -> None:
    with pytest.raises(GroupRecordError, match="field 0 is bool"):
        decode_offset_commit_value(b"\x00\x03" + msgpack.packb([True, -1, None, 0]))
    with pytest.raises(GroupRecordError, match="group member is str"):
        decode_group_metadata_value(b"\x00\x03" + msgpack.packb(["c", 1, None, None, 0,
                                                                 ["m"]]))
