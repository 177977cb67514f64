"""ACLs on a real cluster (``authorizer_enabled``), judged by librdkafka and ours: a user
denied Write gets TOPIC_AUTHORIZATION_FAILED, a reader reads through its group and no
other, topics a user may not Describe are not listed, super users may do anything; rules
added with ``minikafka cluster acl add`` apply without a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as ConfluentNewTopic

from broker.cluster.launcher import main as cluster_main
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_client_auth import add_user

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

PASSWORD = "a long enough password"


def login(user: str) -> dict[str, Any]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user, "sasl_plain_password": PASSWORD}


def confluent(cluster: LocalCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": PASSWORD}


def acl(cluster: LocalCluster, *rule: str) -> None:
    assert cluster_main(["acl", "add", *rule, "--data-dir", cluster.data_dir]) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("acl")), 3, {
            "client_auth_required": "true", "authorizer_enabled": "true",
            "super_users": "User:admin"}) as c:
        for user in ("admin", "alice", "bob"):
            added = add_user(c.data_dir, user, PASSWORD)
            assert added.returncode == 0, added.stderr
        acl(c, "User:alice", "Allow", "Write", "Topic", "orders")
        acl(c, "User:bob", "Allow", "Read", "Topic", "orders")
        acl(c, "User:bob", "Allow", "Read", "Group", "readers")

        def created() -> bool:  # brokers read the users file within a second
            try:
                with Admin(c.bootstrap, request_timeout_ms=5_000, **login("admin")) as admin:
                    admin.create_topics([NewTopic("orders", 1, 3), NewTopic("secret", 1, 3)])
                return True
            except Exception:
                return False

        wait_until(created, 30, "topics created by the super user")
        yield c


def test_write_needs_write_and_reading_needs_the_topic_and_the_group(
        cluster: LocalCluster) -> None:
    with Producer(cluster.bootstrap, acks="all", **login("alice")) as producer:
        metas = [producer.send("orders", b"order-%d" % i) for i in range(30)]
        producer.flush()
        assert [m.result(30).offset for m in metas] == list(range(30))
    denied: list[Any] = []
    bob = ConfluentProducer({**confluent(cluster, "bob"), "acks": "all"})
    bob.produce("orders", b"not bob's to write",
                on_delivery=lambda err, _msg: denied.append(err))
    assert bob.flush(30) == 0
    assert [e.code() for e in denied] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # an idempotent producer needs Write on some topic (or IdempotentWrite): bob has none
    bob_idempotent = ConfluentProducer({**confluent(cluster, "bob"), "acks": "all",
                                        "enable.idempotence": True})
    bob_idempotent.produce("orders", b"never")
    deadline = time.monotonic() + 30
    with pytest.raises(KafkaException) as fatal:  # librdkafka: a fatal error
        while time.monotonic() < deadline:
            bob_idempotent.poll(0.2)
    assert fatal.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    def read(group: str) -> tuple[list[bytes], list[int]]:
        consumer = ConfluentConsumer({**confluent(cluster, "bob"), "group.id": group,
                                      "auto.offset.reset": "earliest"})
        got: list[bytes] = []
        errors: list[int] = []
        try:
            consumer.subscribe(["orders"])
            deadline = time.monotonic() + 30
            while len(got) < 30 and not errors and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is None:
                    got.append(msg.value())
                else:
                    errors.append(msg.error().code())
        finally:
            consumer.close()
        return got, errors

    got, errors = read("readers")
    assert got == [b"order-%d" % i for i in range(30)] and errors == []
    got, errors = read("others")  # no rule for this group
    assert got == [] and errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]


def test_topics_a_user_may_not_describe_are_not_listed_or_created(
        cluster: LocalCluster) -> None:
    admin = AdminClient(confluent(cluster, "bob"))
    assert set(admin.list_topics(timeout=10).topics) == {"orders"}  # not "secret"
    futures = admin.create_topics([ConfluentNewTopic("bobs", 1, 1)])
    with pytest.raises(Exception) as refused:
        futures["bobs"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acl(cluster, "User:bob", "Allow", "Create", "Topic", "bobs")  # applies within a second
    wait_until(lambda: _created(admin, "bobs"), 30, "bob may create bobs now")
    everything = AdminClient(confluent(cluster, "admin"))
    assert {"orders", "secret", "bobs"} <= set(everything.list_topics(timeout=10).topics)
    with Admin(cluster.bootstrap, **login("admin")) as ours_admin:
        assert len(ours_admin.describe_cluster().brokers) == 3
    with Admin(cluster.bootstrap, **login("bob")) as ours_bob, \
            pytest.raises(MiniKafkaError) as denied:  # DescribeCluster: Describe on Cluster
        ours_bob.describe_cluster()
    assert denied.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _created(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topics([ConfluentNewTopic(name, 1, 1)])[name].result(30)
        return True
    except Exception as exc:
        code = exc.args[0].code() if exc.args else None
        assert code in (KafkaError.TOPIC_AUTHORIZATION_FAILED,), exc
        return False
