"""Admin's group calls against the fake coordinator: list (with states), describe, offsets,
delete, at our newest versions and at the oldest a broker may serve."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, UnsupportedVersionError
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from tests.clients.consumer.fake_group_coordinator import FakeGroupCluster

FAST: dict[str, Any] = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 100,
                        "retry_backoff_ms": 20, "fetch_max_wait_ms": 50,
                        "auto_offset_reset": "earliest"}


@pytest.fixture(params=["newest", "oldest"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeGroupCluster]:
    c = FakeGroupCluster(2, join_window_s=0.2)
    if request.param == "oldest":
        c.serve_oldest_versions()
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake received requests it could not serve"


def joined(fake: FakeGroupCluster, group: str) -> Consumer:
    """A member of ``group`` that consumed t-0's 3 records and committed."""
    fake.create_topic("t", 2)
    fake.append(TopicPartition("t", 0), build_batch([(None, b"x", 1, ())] * 3))
    consumer = Consumer(fake.bootstrap, group_id=group, enable_auto_commit=False, **FAST)
    consumer.subscribe(["t"])
    got = 0
    deadline = time.monotonic() + 20
    while got < 3:
        assert time.monotonic() < deadline, "records not consumed in time"
        got += sum(len(rs) for rs in consumer.poll(100).values())
    consumer.commit()
    return consumer


def test_list_describe_offsets_delete(fake: FakeGroupCluster) -> None:
    oldest = fake.version_caps != {}
    consumer = joined(fake, "g")
    try:
        with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
            listed = admin.list_groups()
            assert [(g.group_id, g.protocol_type) for g in listed] == [("g", "consumer")]
            # ListGroups carries the state from v4 only
            assert listed[0].state == ("" if oldest else "Stable")
            assert [g.group_id for g in admin.list_groups(states=["Empty"])] == []
            desc = admin.describe_groups(["g"])["g"]
            assert (desc.state, desc.protocol_type, desc.protocol) == ("Stable", "consumer",
                                                                       "range")
            assert [set(m.assignment) for m in desc.members] == [
                {TopicPartition("t", 0), TopicPartition("t", 1)}]
            if oldest:  # OffsetFetch v1 has no "every partition" form
                with pytest.raises(UnsupportedVersionError):
                    admin.list_group_offsets("g")
            else:
                offsets = admin.list_group_offsets("g")
                t0 = TopicPartition("t", 0)
                assert (offsets[t0].offset, offsets[t0].high_watermark, offsets[t0].lag) == (
                    3, 3, 0)
            with pytest.raises(MiniKafkaError) as info:
                admin.delete_groups(["g"])
            assert info.value.code == ErrorCode.NON_EMPTY_GROUP
    finally:
        consumer.close()
    with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
        if not oldest:
            assert [g.group_id for g in admin.list_groups(states=["Empty"])] == ["g"]
        result = admin.delete_groups(["g", "never"], raise_on_error=False)
        assert result["g"] is None
        never = result["never"]
        assert never is not None and never.code == ErrorCode.GROUP_ID_NOT_FOUND
        assert admin.list_groups() == []
    if not oldest:  # FindCoordinator v4 batches its keys; LeaveGroup v3+ names members
        assert (int(ApiKey.FIND_COORDINATOR), 4) in fake.version_log
        assert (int(ApiKey.LEAVE_GROUP), 5) in fake.version_log
        assert (int(ApiKey.OFFSET_FETCH), 9) in fake.version_log  # batched, the newest
    else:
        assert {v for k, v in fake.version_log if k == ApiKey.FIND_COORDINATOR} == {0}
        assert {v for k, v in fake.version_log if k == ApiKey.LEAVE_GROUP} == {0}


def test_coordinator_errors_are_retried(fake: FakeGroupCluster) -> None:
    fake.find_errors = [int(ErrorCode.COORDINATOR_NOT_AVAILABLE)] * 2
    with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
        assert admin.describe_groups(["nobody"])["nobody"].state == "Dead"
    fake.find_errors = [int(ErrorCode.INVALID_GROUP_ID)]
    with Admin(fake.bootstrap, request_timeout_ms=5000) as admin:
        with pytest.raises(MiniKafkaError) as info:
            admin.describe_groups(["bad"])
        assert info.value.code == ErrorCode.INVALID_GROUP_ID
