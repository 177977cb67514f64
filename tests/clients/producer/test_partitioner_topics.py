import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from clients.producer.partitioner import StickyPartitioner, murmur2, partition_for_key
from clients.protocol.topics import InvalidTopicError, topic_name_error, validate_topic_name


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits unsigned; Kafka's Java client (and we) signed.
    ours = murmur2(key)
    assert -(2**31) <= ours < 2**31
    assert ours & 0xFFFFFFFF == kafka_python_murmur2(bytearray(key))


def test_partition_for_key_known_values() -> None:
    # Figures from Kafka's own partitioner tests are reproduced by kafka-python; check
    # both agree on a spread of keys and that the result is in range.
    for i in range(200):
        key = f"key-{i}".encode()
        p = partition_for_key(key, 7)
        assert 0 <= p < 7
        assert p == (kafka_python_murmur2(bytearray(key)) & 0x7FFFFFFF) % 7


def test_partition_for_key_rejects_no_partitions() -> None:
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_partitioner_sticks_then_moves() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 5)
    assert all(sticky.partition("t", 5) == first for _ in range(10))
    sticky.on_new_batch("t", 5, first)
    assert sticky.partition("t", 5) != first


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 250, "has space", "slash/name", "ünïcode", 5]
)
def test_illegal_topic_names(name: object) -> None:
    assert topic_name_error(name) is not None
    with pytest.raises(InvalidTopicError) as info:
        validate_topic_name(name)
    assert info.value.code.name == "INVALID_TOPIC_EXCEPTION"


@pytest.mark.parametrize("name", ["a", "orders", "x.y_z-1", "A" * 249])
def test_legal_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name
