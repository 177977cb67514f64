"""Topic ids on a real 2-broker cluster: confluent-kafka's AdminClient (Metadata v12)
and our admin client read the same id the controller drew; ``minikafka topics
--describe`` prints it; each replica's ``partition.metadata`` holds it in Kafka's form;
DeleteTopics v6 deletes by id; the id is the same after the controller and a broker
restart.  (The upgrade of an old metadata log on disk: test_topic_id_upgrade.py.)"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from clients.admin import Admin
from clients.cli.main import main as cli_main
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import new_topic_id, topic_id_str
from clients.types import NewTopic
from storage.partition_metadata import PARTITION_METADATA
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _confluent_id(admin: AdminClient, name: str) -> str:
    """The topic's id as confluent-kafka read it, in Kafka's text form (librdkafka's own
    ``str`` uses standard base64, ``+/``; Kafka's Uuid.toString is URL-safe, ``-_``)."""
    (future,) = admin.describe_topics(TopicCollection([name])).values()
    uuid = future.result(30).topic_id
    bits = (uuid.get_most_significant_bits(), uuid.get_least_significant_bits())
    return topic_id_str(struct.pack(">qq", *bits))


def test_topic_ids_are_served_deleted_by_and_kept_across_restarts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LocalCluster(tmp_path, 2) as cluster, Admin(cluster.bootstrap) as ours:
        ours.create_topics([NewTopic("ids", 2, 2), NewTopic("gone", 1, 1)])
        described = ours.describe_topics(["ids", "gone"])
        topic_id, gone_id = described["ids"].topic_id, described["gone"].topic_id
        assert topic_id is not None and gone_id is not None and topic_id != gone_id
        assert topic_id != topic_id_str(bytes(16))
        assert ours.list_topic_ids() == {"gone": gone_id, "ids": topic_id}

        theirs = AdminClient({"bootstrap.servers": cluster.bootstrap})
        assert _confluent_id(theirs, "ids") == topic_id

        assert cli_main(["topics", "--bootstrap-server", cluster.bootstrap, "--describe",
                         "--topic", "ids"]) == 0
        assert f"Topic: ids\tTopicId: {topic_id}\tPartitionCount: 2" in capsys.readouterr().out

        for broker in cluster.state.brokers.values():
            for p in range(2):
                path = Path(broker.data_dir) / f"ids-{p}" / PARTITION_METADATA
                wait_until(path.exists, 30, f"{path} written", 0.05)
                assert path.read_text() == f"version: 0\ntopic_id: {topic_id}\n"

        unknown = topic_id_str(new_topic_id())
        result = ours.delete_topics_by_id([gone_id, unknown], raise_on_error=False)
        error = result[unknown]
        assert result[gone_id] is None and error is not None
        assert error.code == ErrorCode.UNKNOWN_TOPIC_ID
        assert "gone" not in ours.list_topics()

        cluster.restart("controller")
        cluster.restart("0")
        cluster.wait_partition("ids", 0, lambda s: len(s["isr"]) == 2, "in sync again")
        with Admin(cluster.bootstrap) as again:  # the old connection went with broker 0
            assert again.describe_topics(["ids"])["ids"].topic_id == topic_id
        assert _confluent_id(theirs, "ids") == topic_id
