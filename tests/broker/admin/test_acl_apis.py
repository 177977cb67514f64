"""Kafka's ACL admin APIs (DescribeAcls, CreateAcls, DeleteAcls) on a real 2-broker
cluster, judged by confluent-kafka's AdminClient and ours: only a user with Alter /
Describe on the cluster may change / list ACLs; created bindings are listed by filter
(literal, prefixed, MATCH, principal) and take effect on both brokers' logins; deleted
ones stop applying; bindings the rule file cannot say are refused with INVALID_REQUEST."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from clients.admin import Admin
from clients.admin.acls import AclBinding as OurBinding
from clients.admin.acls import AclBindingFilter as OurFilter
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_client_auth import add_user

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

PASSWORD = "a long enough password"


def confluent(cluster: LocalCluster, user: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": PASSWORD}


def ours(cluster: LocalCluster, user: str) -> Admin:
    return Admin(cluster.bootstrap, request_timeout_ms=10_000,
                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                 sasl_plain_username=user, sasl_plain_password=PASSWORD)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("acl-apis")), 2, {
            "client_auth_required": "true", "authorizer_enabled": "true",
            "super_users": "User:admin"}) as c:
        for user in ("admin", "carol", "dave"):
            added = add_user(c.data_dir, user, PASSWORD)
            assert added.returncode == 0, added.stderr

        def created() -> bool:  # brokers read the users file within a second
            try:
                with ours(c, "admin") as admin:
                    admin.create_topics([NewTopic("orders", 2, 2)])
                return True
            except Exception:
                return False

        wait_until(created, 30, "topic created by the super user")
        yield c


def _produce_codes(cluster: LocalCluster, user: str) -> list[int | None]:
    """The delivery result of one record to each partition of ``orders`` (a broker
    leads each: both brokers judge the login)."""
    producer = ConfluentProducer({**confluent(cluster, user), "acks": "all",
                                  "message.timeout.ms": 10_000})
    results: list[int | None] = []
    for partition in (0, 1):
        producer.produce("orders", b"x", partition=partition,
                         on_delivery=lambda err, _m: results.append(
                             None if err is None else err.code()))
    assert producer.flush(30) == 0
    return results


WRITE_ORDERS = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                          "User:carol", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
READ_BILLING = AclBinding(ResourceType.GROUP, "billing-", ResourcePatternType.PREFIXED,
                          "User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW)
DESCRIBE_ALL = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL,
                          "User:carol", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)


def _code(exc: KafkaException) -> int:
    return int(exc.args[0].code())


def test_confluent_creates_describes_and_deletes_acls_that_apply_on_every_broker(
        cluster: LocalCluster) -> None:
    dave = AdminClient(confluent(cluster, "dave"))
    # librdkafka drops DescribeAcls' top-level error (rd_kafka_DescribeAclsResponse_parse
    # reads it and answers the empty list); ours raises it (test_our_admin_client_...)
    assert dave.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(30) == []
    with pytest.raises(KafkaException) as denied:
        dave.create_acls([WRITE_ORDERS])[WRITE_ORDERS].result(30)
    assert _code(denied.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    assert set(_produce_codes(cluster, "carol")) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    admin = AdminClient(confluent(cluster, "admin"))
    for future in admin.create_acls([WRITE_ORDERS, READ_BILLING, DESCRIBE_ALL]).values():
        assert future.result(30) is None
    # a binding already there is success (Kafka's rule), and is not written twice
    assert admin.create_acls([WRITE_ORDERS])[WRITE_ORDERS].result(30) is None
    rules = (Path(cluster.data_dir) / "acls.txt").read_text().splitlines()
    assert rules.count("User:carol Allow Write Topic orders") == 1
    assert "User:carol Allow Read Group billing-*" in rules

    def described(*args: Any) -> set[AclBinding]:
        return set(admin.describe_acls(AclBindingFilter(*args)).result(30))

    assert described(ResourceType.TOPIC, "orders", ResourcePatternType.ANY, None, None,
                     AclOperation.ANY, AclPermissionType.ANY) == {WRITE_ORDERS}
    assert described(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None,
                     AclOperation.ANY, AclPermissionType.ANY) == {WRITE_ORDERS, DESCRIBE_ALL}
    assert described(ResourceType.GROUP, "billing-eu", ResourcePatternType.MATCH, None, None,
                     AclOperation.ANY, AclPermissionType.ANY) == {READ_BILLING}
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None,
                     AclOperation.READ, AclPermissionType.ANY) == {READ_BILLING}
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, "User:dave", None,
                     AclOperation.ANY, AclPermissionType.ANY) == set()

    # the new rule applies to carol's logins on both brokers (each leads a partition)
    wait_until(lambda: _produce_codes(cluster, "carol") == [None, None], 30,
               "carol may write orders on both brokers")

    by_host = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                         "User:carol", "10.0.0.1", AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([by_host])[by_host].result(30)
    assert _code(refused.value) == KafkaError.INVALID_REQUEST

    topic_filter = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY,
                                    "User:carol", None, AclOperation.ANY,
                                    AclPermissionType.ANY)
    deleted = admin.delete_acls([topic_filter])[topic_filter].result(30)
    assert set(deleted) == {WRITE_ORDERS, DESCRIBE_ALL}
    assert described(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                     AclOperation.ANY, AclPermissionType.ANY) == {READ_BILLING}
    wait_until(lambda: set(_produce_codes(cluster, "carol"))
               == {KafkaError.TOPIC_AUTHORIZATION_FAILED}, 30,
               "carol may no longer write orders")


def test_our_admin_client_round_trips_acls(cluster: LocalCluster) -> None:
    binding = OurBinding("TRANSACTIONAL_ID", "tx-", "PREFIXED", "User:dave", "*", "WRITE",
                         "DENY")
    with ours(cluster, "admin") as admin:
        assert admin.create_acls([binding]) == {binding: None}
        assert admin.describe_acls(OurFilter(principal="User:dave")) == [binding]
        wanted = OurFilter(resource_type="TRANSACTIONAL_ID", resource_name="tx-9",
                           pattern_type="MATCH")
        assert admin.describe_acls(wanted) == [binding]
        assert admin.delete_acls([wanted]) == {wanted: [binding]}
        assert admin.describe_acls(OurFilter(principal="User:dave")) == []
        with pytest.raises(ValueError):
            OurBinding("TOPIC", "t", "MATCH", "User:x", "*", "READ", "ALLOW").wire()
    with ours(cluster, "dave") as dave, pytest.raises(MiniKafkaError) as denied:
        dave.describe_acls(OurFilter())
    assert denied.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_elect_leaders_needs_alter_on_the_cluster(cluster: LocalCluster) -> None:
    with ours(cluster, "dave") as dave, pytest.raises(MiniKafkaError) as denied:
        dave.elect_leaders("preferred", [TopicPartition("orders", 0)])
    assert denied.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with ours(cluster, "admin") as admin:  # a super user
        result = admin.elect_leaders("preferred", [TopicPartition("orders", 0)],
                                     raise_on_error=False)
    error = result[TopicPartition("orders", 0)]
    assert error is not None and error.code == ErrorCode.ELECTION_NOT_NEEDED
