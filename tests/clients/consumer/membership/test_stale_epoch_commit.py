"""A KIP-848 member's commit answered STALE_MEMBER_EPOCH by a real broker (1 broker,
controller mode) is retried at the member's epoch once the heartbeat publishes it.  The
stale epoch is provoked by writing an older epoch into what the heartbeat thread
publishes (``GroupShared.generation_id``); the next heartbeat answer puts the real one
back, and the commit (sync, then async) goes through with it.  (The member first moves
to epoch 2 or more by widening its subscription: an epoch-0 commit is not a member's.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.consumer.membership.group_member import ConsumerProtocolMembership
from clients.consumer.membership.member import MembershipState
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC, OTHER, GROUP = "stale-epoch", "stale-epoch-other", "stale-epoch-group"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, brokers=1,
                      overrides={"group_consumer_heartbeat_interval_ms": 300}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(OTHER, 1, 1)])
        yield c


def committed_offset(consumer: Consumer) -> int | None:
    found = consumer.committed([TP])[TP]
    return None if found is None else found.offset


def test_a_commit_at_a_stale_epoch_is_retried_at_the_members_epoch(
        cluster: LocalCluster) -> None:
    consumer = Consumer(cluster.bootstrap, group_id=GROUP, group_protocol="consumer",
                        enable_auto_commit=False, retry_backoff_ms=50)
    try:
        consumer.subscribe([TOPIC])
        group = consumer._coordinator
        assert isinstance(group, ConsumerProtocolMembership)
        wait_until(lambda: consumer.poll(50) == {} and group.state is MembershipState.STABLE
                   and consumer.assignment() == {TP}, 60, "the member owns the partition")
        consumer.subscribe([TOPIC, OTHER])
        wait_until(lambda: consumer.poll(50) == {} and group.state is MembershipState.STABLE
                   and len(consumer.assignment()) == 2, 60, "the member owns both")
        with group.shared.lock:
            epoch = group.shared.generation_id
            assert epoch >= 2
            group.shared.generation_id = epoch - 1  # as if the answer were still on its way
        consumer.commit({TP: 3})  # STALE_MEMBER_EPOCH, then retried at the epoch
        assert group.shared.generation_id == epoch
        assert committed_offset(consumer) == 3
        results: list[MiniKafkaError | None] = []
        with group.shared.lock:
            group.shared.generation_id = epoch - 1
        consumer.commit_async({TP: 5}, lambda _, error: results.append(error))
        wait_until(lambda: consumer.poll(50) == {} and bool(results), 30,
                   "the async commit completes")
        assert results == [None]
        assert committed_offset(consumer) == 5
    finally:
        consumer.close()
