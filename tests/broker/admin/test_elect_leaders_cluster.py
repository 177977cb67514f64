"""ElectLeaders on a real 2-broker cluster (automatic preferred elections off): a broker
restart moves leadership away from the preferred replica; confluent-kafka's
AdminClient.elect_leaders and ``minikafka leader-election`` move it back; a partition
whose preferred replica leads is ELECTION_NOT_NEEDED.  (A user without Alter on the
cluster is refused: tests/broker/admin/test_acl_apis.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient

from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TOPIC = "elect"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("elect")), 2, controller_overrides={
            "auto_leader_rebalance_enable": "false"}) as c:
        with Admin(c.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, replica_assignments={
                0: [0, 1], 1: [0, 1], 2: [1, 0]})])
        for p in range(3):
            c.wait_partition(TOPIC, p, lambda s: len(s["isr"]) == 2, "in sync")
        yield c


def test_a_restart_moves_leadership_and_elect_leaders_moves_it_back(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    assert [cluster.partition(TOPIC, p)["leader"] for p in range(3)] == [0, 0, 1]
    cluster.restart("0")
    for p in (0, 1):  # led by 1 now; 0 back in the ISR (it rejoins after catching up)
        cluster.wait_partition(TOPIC, p, lambda s: s["leader"] == 1 and len(s["isr"]) == 2,
                               "moved to broker 1 with broker 0 back in sync")

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = [ConfluentPartition(TOPIC, 0), ConfluentPartition(TOPIC, 2)]
    result = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(30)
    codes = {(tp.topic, tp.partition): None if e is None else e.code()
             for tp, e in result.items()}
    assert codes == {(TOPIC, 0): None, (TOPIC, 2): KafkaError.ELECTION_NOT_NEEDED}
    cluster.wait_partition(TOPIC, 0, lambda s: s["leader"] == 0, "preferred leader again")
    assert cluster.partition(TOPIC, 1)["leader"] == 1  # not asked for

    assert cli_main(["leader-election", "--bootstrap-server", cluster.bootstrap,
                     "--election-type", "preferred", "--topic", TOPIC, "--partition",
                     "1"]) == 0
    assert f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-1" \
        in capsys.readouterr().out
    cluster.wait_partition(TOPIC, 1, lambda s: s["leader"] == 0, "preferred leader again")
    assert cli_main(["leader-election", "--bootstrap-server", cluster.bootstrap,
                     "--election-type", "preferred", "--all-topic-partitions"]) == 0
    assert "No partition needed an election." in capsys.readouterr().out

    with Admin(cluster.bootstrap) as ours:
        result2 = ours.elect_leaders("preferred", [TopicPartition(TOPIC, 0),
                                                   TopicPartition(TOPIC, 7)],
                                     raise_on_error=False)
    assert {tp: e and e.code for tp, e in result2.items()} == {
        TopicPartition(TOPIC, 0): ErrorCode.ELECTION_NOT_NEEDED,
        TopicPartition(TOPIC, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
