"""A controller process started with Kafka's quorum flags for one voter (itself) is
today's controller and answers DescribeQuorum as a quorum of one: itself the leader,
every record committed; another partition gets UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from tests.broker.controller.processes import ControllerClient, ControllerProcess

pytestmark = pytest.mark.multiprocess


def test_one_voter_describes_itself_as_leader(tmp_path: Path) -> None:
    proc = ControllerProcess(tmp_path / "controller", {
        "node_id": 3000, "controller_quorum_voters": "3000@127.0.0.1:9093"})
    try:
        proc.start()
        client = ControllerClient(proc.port)
        assert client.register(1, "incarnation-1", 9101)["error_code"] == 0
        end = client.fetch_metadata(0)["high_watermark"]
        assert end > 0
        answer = client.call(ApiKey.DESCRIBE_QUORUM, {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]},
            {"topic_name": "other", "partitions": [{"partition_index": 0}]}]})
        ours, other = (t["partitions"][0] for t in answer["topics"])
        assert (ours["error_code"], ours["leader_id"], ours["high_watermark"]) == (0, 3000, end)
        assert [v["replica_id"] for v in ours["current_voters"]] == [3000]
        assert ours["current_voters"][0]["log_end_offset"] == end
        assert other["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        client.close()
    finally:
        proc.kill()
