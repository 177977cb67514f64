"""Our follower (replica fetcher) fetches in a KIP-227 session from a real leader core;
by topic id (Fetch v17) when it follows a topic with one, and a follower whose topic was
deleted and re-created on the leader copies nothing of the new topic."""

from __future__ import annotations

import asyncio

from broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from tests.broker.test_replica_fetcher import (
    KEY,
    TOPIC,
    Node,
    append_as_leader,
    cluster_records,
    fetcher_of,
    nodes,  # noqa: F401 (the fixture)
)
from tests.replication.helpers import values


def test_the_follower_fetches_incrementally_and_starts_over_when_the_session_is_lost(
        nodes: tuple[Node, Node]) -> None:  # noqa: F811
    leader, follower = nodes
    for node in nodes:
        node.apply(*cluster_records((1, 2)))
    append_as_leader(leader, b"a", b"b")
    fetcher, link = fetcher_of(follower, leader, truncating=False)
    for _ in range(3):
        asyncio.run(fetcher._fetch())
    fetches = [body for api, body in link.sent if api == ApiKey.FETCH]
    assert [f["session_epoch"] for f in fetches] == [0, 1, 2]
    sid = fetches[0]["session_id"] or fetches[1]["session_id"]
    assert sid != 0 and leader.core.fetch_sessions.get(sid) is not None
    assert follower.partition.high_watermark == 2 == leader.partition.high_watermark
    assert fetches[2]["topics"] == []  # nothing changed: no partition named
    # the leader loses the session (evicted): the follower fetches in full and goes on
    leader.core.fetch_sessions.remove(sid)
    append_as_leader(leader, b"c")
    for _ in range(3):
        asyncio.run(fetcher._fetch())
    fetches = [body for api, body in link.sent if api == ApiKey.FETCH]
    assert [f["session_epoch"] for f in fetches[3:]] == [3, 0, 1]
    assert fetches[3]["session_id"] == sid and fetches[4]["session_id"] == 0
    assert values(follower.partition.log) == values(leader.partition.log)
    assert [v for _, v in values(follower.partition.log)] == [b"a", b"b", b"c"]


A, B = bytes(range(1, 17)), bytes(range(2, 18))


def records_with_id(topic_uuid: bytes) -> list[MetadataRecord]:
    return [RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
            RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
            UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
            TopicRecord(TOPIC, 4, 1, 2, {}, topic_uuid),
            PartitionRecord(TOPIC, 0, (1, 2), 1, 0, (1, 2), 0)]


def test_the_follower_fetches_by_topic_id_and_never_copies_a_recreated_topic(
        nodes: tuple[Node, Node]) -> None:  # noqa: F811
    leader, follower = nodes
    for node in nodes:
        node.apply(*records_with_id(A))
    append_as_leader(leader, b"a", b"b")
    fetcher, link = fetcher_of(follower, leader, truncating=False)
    fetcher.states[KEY].topic_id = A  # what ReplicaFetcherManager.follow gives it
    versions: list[int | None] = []
    codes: list[int] = []
    request = link.request

    async def watched(api_key: int, body: dict, **options: object) -> dict:  # type: ignore[type-arg]
        versions.append(options.get("api_version"))  # type: ignore[arg-type]
        answer = await request(api_key, body, **options)
        codes.extend(p["error_code"] for t in answer.get("responses", ())
                     for p in t["partitions"])
        return answer

    link.request = watched  # type: ignore[method-assign]
    for _ in range(3):
        asyncio.run(fetcher._fetch())
    fetches = [body for api, body in link.sent if api == ApiKey.FETCH]
    assert versions == [17, 17, 17] and [f["session_epoch"] for f in fetches] == [0, 1, 2]
    assert fetches[0]["topics"][0]["topic_id"] == A
    assert fetches[0]["replica_state"] == {"replica_id": 2, "replica_epoch": -1}
    session = leader.core.fetch_sessions.get(fetches[1]["session_id"])
    assert session is not None and session.uses_topic_ids and list(session.partitions) == [
        (A, 0)]
    assert [v for _, v in values(follower.partition.log)] == [b"a", b"b"]
    # the leader deletes the topic and creates it again (id B) with other records; the
    # follower has not heard yet and asks by id A: UNKNOWN_TOPIC_ID, nothing copied
    leader.apply(RemoveTopicRecord(TOPIC), TopicRecord(TOPIC, 40, 1, 2, {}, B),
                 PartitionRecord(TOPIC, 0, (1, 2), 1, 0, (1, 2), 0))
    append_as_leader(leader, b"x", b"y", b"z")
    codes.clear()
    for _ in range(3):
        asyncio.run(fetcher._fetch())
        fetcher.session.backoff = False
    assert codes and set(codes) == {ErrorCode.UNKNOWN_TOPIC_ID}
    assert [v for _, v in values(follower.partition.log)] == [b"a", b"b"]
    assert follower.partition.log_end_offset == 2
