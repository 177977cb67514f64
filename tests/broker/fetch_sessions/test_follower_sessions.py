"""Our follower (replica fetcher) fetches in a KIP-227 session from a real leader core."""

from __future__ import annotations

import asyncio

from clients.protocol.api_keys import ApiKey
from tests.broker.test_replica_fetcher import (
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
