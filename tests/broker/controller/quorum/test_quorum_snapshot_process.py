"""Real processes (``cluster start --controllers 3``, one broker, the cluster secret):
with ``quorum_cut_log_at_snapshot`` and a snapshot every 5 records, a follower voter is
SIGKILLed while the others snapshot and cut their logs past its end; restarted, it is
below the leader's log start, catches up by FetchSnapshot (its log restarts at a
snapshot's end offset: a segment whose base offset is past 0) and every voter answers
the same committed metadata.  Processes are stopped by :class:`LocalCluster` by PID.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.async_client import AsyncConnection
from broker.auth import broker_login, read_cluster_secret
from broker.cluster.controllers import active_controller
from broker.controller.quorum.snapshots import QuorumSnapshots
from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.controller.quorum.test_quorum_failover import (
    FAST,
    QUORUM,
    caught_up,
    quorum_view,
)
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

SNAPSHOTS: dict[str, object] = {**QUORUM, "metadata_snapshot_interval_records": 5,
                                "quorum_cut_log_at_snapshot": "true"}


def _metadata(port: int, login: tuple[str, bytes] | None) -> dict[str, Any]:
    async def ask() -> dict[str, Any]:
        conn = AsyncConnection("127.0.0.1", port, client_id="test", login=login)
        try:
            return await conn.request(ApiKey.METADATA, {"topics": None},
                                      api_version=12, timeout_ms=10_000)
        finally:
            conn.close()
    return asyncio.run(ask())


def _topics(port: int, login: tuple[str, bytes] | None) -> list[tuple[str, int]]:
    return sorted((t["name"], len(t["partitions"])) for t in _metadata(port, login)["topics"])


def _log_dir(cluster: LocalCluster, name: str) -> Path:
    return Path(cluster.state.controllers[name].data_dir) / "__cluster_metadata-0"


def test_a_voter_down_while_the_others_cut_their_logs_catches_up_by_fetch_snapshot(
        tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 1, FAST, controller_overrides=SNAPSHOTS,
                      controllers=3) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("t0", 1, 1)])
        leader = active_controller(cluster.state).name
        follower = next(n for n in cluster.state.controllers if n != leader)
        wait_until(lambda: caught_up(cluster, follower), 20, f"{follower} caught up")
        stopped_end = next(v["log_end_offset"] for v in quorum_view(cluster)["voters"]
                           if v["name"] == follower)
        cluster.kill(follower)  # SIGKILL
        with Admin(cluster.bootstrap) as admin:
            for i in range(1, 9):
                admin.create_topics([NewTopic(f"t{i}", 1, 1)])

        def cut_past_it() -> bool:  # the leader's log starts at its older snapshot
            kept = QuorumSnapshots(_log_dir(cluster, leader)).list()
            return len(kept) == 2 and kept[0][0].end_offset > stopped_end

        wait_until(cut_past_it, 30, "the leader's log cut past the stopped voter's end")

        cluster.restart(follower)
        wait_until(lambda: caught_up(cluster, follower), 30, f"{follower} caught up")
        # its log restarted at a snapshot it fetched: a segment based past 0
        bases = [int(p.name[:20]) for p in _log_dir(cluster, follower).glob("*.log")]
        assert bases and min(bases) > 0, bases
        assert QuorumSnapshots(_log_dir(cluster, follower)).latest_id() is not None

        secret = read_cluster_secret(str(Path(cluster.data_dir) / "cluster.secret"))
        login = broker_login(secret, 0)
        expected = [(f"t{i}", 1) for i in range(9)]
        for name, info in cluster.state.controllers.items():
            wait_until(lambda port=info.port: _topics(port, login) == expected, 20,
                       f"{name} answers every topic")
