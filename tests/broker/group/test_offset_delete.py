"""OffsetDelete on a group with members (Kafka's ``handleDeleteOffsets``): the offsets of
topics the members do not subscribe to go, the others answer GROUP_SUBSCRIBED_TO_TOPIC;
a group of another protocol type with members answers NON_EMPTY_GROUP.  Driven with the
coordinator harness of test_coordinator (ManualClock, offsets log in memory)."""

from __future__ import annotations

import pytest

from clients.consumer.group_protocol import Subscription, encode_subscription
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from tests.broker.group.test_coordinator import SESSION_MS, Box, Harness

A0, A1, B0, C0 = (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0),
                  TopicPartition("c", 0))
Result = tuple[ErrorCode, dict[TopicPartition, ErrorCode]]


def commit(h: Harness, tps: list[TopicPartition], group: str = "g",
           member_id: str = "", generation: int = -1) -> None:
    box = Box()
    topics: dict[str, list[int]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append(tp.partition)
    h.c.commit_offsets({"group_id": group, "generation_id": generation, "member_id": member_id,
                        "group_instance_id": None,
                        "topics": [{"name": t, "partitions": [
                            {"partition_index": p, "committed_offset": 5,
                             "committed_leader_epoch": -1, "committed_metadata": ""}
                            for p in ps]} for t, ps in topics.items()]}, box)
    codes = {p["error_code"] for t in box.answer["topics"] for p in t["partitions"]}
    assert codes == {0}, box.answer


def committed(h: Harness, tp: TopicPartition, group: str = "g") -> int:
    code, topics = h.c.fetch_offsets(group, [{"name": tp.topic,
                                               "partition_indexes": [tp.partition]}])
    assert code == ErrorCode.NONE
    return int(topics[0]["partitions"][0]["committed_offset"])


def delete(h: Harness, tps: list[TopicPartition], group: str = "g") -> Result:
    results: list[Result] = []
    h.c.delete_offsets(group, tps, lambda *a: results.append(a))
    assert len(results) == 1
    return results[0]


def subscribing(*topics: str) -> tuple[tuple[str, bytes], ...]:
    return (("range", encode_subscription(Subscription(topics))),)


def test_offsets_of_topics_the_members_do_not_subscribe_to_are_deleted() -> None:
    h = Harness()
    commit(h, [A0, A1, B0, C0])  # a simple commit while the group is Empty
    (_leader, other), _generation = h.stable_group(2, protocols=subscribing("a"))
    h.join(other, protocols=subscribing("c"))  # a rebalance: c subscribed too
    written = len(h.log.records)
    assert delete(h, [A0, B0, C0, TopicPartition("d", 0)]) == (ErrorCode.NONE, {
        A0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, B0: ErrorCode.NONE,
        C0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, TopicPartition("d", 0): ErrorCode.NONE})
    assert [committed(h, tp) for tp in (A0, A1, B0, C0)] == [5, 5, -1, 5]
    assert [value for _, value, _ in h.log.records[written:]] == [None]  # b-0's tombstone


@pytest.mark.parametrize("metadata", [b"", b"\x00", b"\xff\xff\x00\x00\x00\x00",
                                      b"\x00\x00\x00\x00\x00\x09ab"])
def test_a_subscription_that_does_not_decode_keeps_every_offset(metadata: bytes) -> None:
    h = Harness()
    commit(h, [B0])
    h.stable_group(1, protocols=(("range", metadata),))
    assert delete(h, [B0]) == (ErrorCode.NONE, {B0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
    assert committed(h, B0) == 5


def test_a_newer_subscription_version_is_read_by_its_topics() -> None:
    h = Harness()
    commit(h, [A0, B0])
    newer = encode_subscription(Subscription(("a",)))
    newer = b"\x00\x09" + newer[2:] + b"fields of version 9"
    h.stable_group(1, protocols=(("range", newer),))
    assert delete(h, [A0, B0]) == (ErrorCode.NONE, {A0: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                                                    B0: ErrorCode.NONE})


def test_a_group_of_another_protocol_type_with_members_is_refused_whole() -> None:
    h = Harness()
    commit(h, [B0], group="connect")
    box = Box()
    h.c.join_group({"group_id": "connect", "session_timeout_ms": SESSION_MS,
                    "rebalance_timeout_ms": SESSION_MS, "member_id": "",
                    "group_instance_id": None, "protocol_type": "connect",
                    "protocols": [{"name": "sessioned", "metadata": b""}]}, box)
    member_id = box.answer["member_id"]
    box = Box()
    h.c.join_group({"group_id": "connect", "session_timeout_ms": SESSION_MS,
                    "rebalance_timeout_ms": SESSION_MS, "member_id": member_id,
                    "group_instance_id": None, "protocol_type": "connect",
                    "protocols": [{"name": "sessioned", "metadata": b""}]}, box)
    assert box.code == ErrorCode.NONE
    assert delete(h, [B0], group="connect") == (ErrorCode.NON_EMPTY_GROUP, {})
    assert committed(h, B0, group="connect") == 5


def test_an_empty_group_deletes_every_partition_named_and_a_dead_one_is_not_found() -> None:
    h = Harness()
    (member,), generation = h.stable_group(1, protocols=subscribing("a"))
    commit(h, [A0], member_id=member, generation=generation)
    h.c.leave_group({"group_id": "g", "members": [{"member_id": member,
                                                     "group_instance_id": None}]}, Box())
    assert delete(h, [A0]) == (ErrorCode.NONE, {A0: ErrorCode.NONE})
    assert committed(h, A0) == -1
    results: list[list[tuple[str, ErrorCode]]] = []
    h.c.delete_groups(["g"], results.append)
    assert results == [[("g", ErrorCode.NONE)]]
    assert delete(h, [A0]) == (ErrorCode.GROUP_ID_NOT_FOUND, {})
