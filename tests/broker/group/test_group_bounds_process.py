"""A real broker bounds the member metadata its group coordinator holds (issue 30, item 8).

The attack: JoinGroup v1 requests with about a MiB of protocol metadata each, into one
group.  Each one was kept (RSS grew by the sum) and the leader's JoinGroup answer, every
member's metadata at once, grew past what a frame can carry.  Now a member's own
metadata is bounded (``group_max_member_metadata_bytes``: INVALID_REQUEST), and so is a
group's total (``group_max_metadata_bytes``: GROUP_MAX_SIZE_REACHED for the member that
would pass it), so the leader's answer is always sent.  The test runs the defaults
(1 MiB per member, 8 MiB per group).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.protocol.errors import ErrorCode
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import call, connect, recv_frame, request

pytestmark = pytest.mark.multiprocess

KIB = 1024
JOIN_V = 1  # no KIP-394 member-id round trip: a member joins with its first request


def join_body(metadata: bytes) -> dict[str, object]:
    return {"group_id": "big", "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": metadata}]}


def test_join_group_metadata_is_bounded_per_member_and_per_group(tmp_path: Path) -> None:
    # the default bounds: 1 MiB per member, 8 MiB per group
    overrides = {"group_initial_rebalance_delay_ms": 3_000,
                 "offsets_topic_num_partitions": 1, "offsets_topic_replication_factor": 1}
    with BrokerProcess(tmp_path / "broker", overrides=overrides) as broker:
        probe = connect(broker.port)
        for _ in range(100):  # the first FindCoordinator creates the offsets topic
            found = call(probe, ApiKey.FIND_COORDINATOR, 1, {"key": "big", "key_type": 0})
            if found["error_code"] == 0:
                break
        assert found["error_code"] == 0, found
        # one member over its own bound
        too_big = call(probe, ApiKey.JOIN_GROUP, JOIN_V, join_body(bytes(1100 * KIB)))
        assert too_big["error_code"] == ErrorCode.INVALID_REQUEST, too_big["error_code"]
        # ten members of 1000 KiB into a group bounded at 8 MiB: eight fit
        sockets = [connect(broker.port) for _ in range(10)]
        try:
            for i, sock in enumerate(sockets):
                sock.sendall(request(ApiKey.JOIN_GROUP, JOIN_V,
                                     join_body(bytes([i]) * (1000 * KIB))))
            answers = [decode_response(recv_frame(s), ApiKey.JOIN_GROUP, JOIN_V).body
                       for s in sockets]
            codes = sorted(a["error_code"] for a in answers)
            assert codes == [0] * 8 + [ErrorCode.GROUP_MAX_SIZE_REACHED] * 2, codes
            (leader,) = [i for i, a in enumerate(answers) if a["members"]]
            members = answers[leader]["members"]
            assert len(members) == 8
            assert all(len(m["metadata"]) == 1000 * KIB for m in members)
            # the group's record (every member's metadata) fits the offsets topic
            synced = call(sockets[leader], ApiKey.SYNC_GROUP, 1, {
                "group_id": "big", "generation_id": answers[leader]["generation_id"],
                "member_id": answers[leader]["member_id"],
                "assignments": [{"member_id": m["member_id"], "assignment": b"a"}
                                for m in members]})
            assert synced["error_code"] == 0, synced
        finally:
            for sock in sockets:
                sock.close()
            probe.close()
