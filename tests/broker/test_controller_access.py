"""Who may use the controller's port, and what any port serves before a login, on a
cluster that requires logins (``client_auth_required``, ``authorizer_enabled``, TLS on
every port): issue 30's items 1 and 3, judged with raw frames, kafka-python and
confluent-kafka.

Before: over TLS with no login, a client created a topic, grew one to 4 partitions,
changed its configs and deleted it on the controller's port, and read its Metadata; and
a Metadata naming 1,001 topics or a Fetch naming 1,001 partitions was answered before
the login on the brokers' client and internal ports and on the controller's.  Now the
controller serves nothing but ApiVersions and the SASL exchange before a broker login
(client users cannot log in there: admin requests reach it through a broker, which
checks the user's ACLs first), and every port closes a connection that sends anything
else before its login, over a bound or not.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaAdminClient
from kafka.errors import KafkaConnectionError, KafkaError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from kafka.protocol.metadata import MetadataRequest

from broker.cluster.status import fetch_cluster_view
from clients.admin import Admin
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import broker_password
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import call, connect
from tests.broker.test_client_auth import add_user
from tests.broker.test_internal_auth import closed_unanswered, login
from tests.tls_certs import Certs, make_certs

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

PASSWORD = "a long enough password"
TOPIC = "kept"
OVER = 1_001  # one more than max_metadata_topics and max_fetch_partitions (1,000)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


def sasl_ssl(user: str, certs: Certs) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": user,
            "sasl_plain_password": PASSWORD}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("ctl-access")), 1, {
            "ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key,
            "ssl_cafile": certs.ca, "client_auth_required": "true",
            "authorizer_enabled": "true", "super_users": "User:admin"}) as c:
        for user in ("admin", "alice"):
            added = add_user(c.data_dir, user, PASSWORD)
            assert added.returncode == 0, added.stderr

        def created() -> bool:  # brokers read the users file within a second
            try:
                with Admin(c.bootstrap, request_timeout_ms=5_000,
                           **sasl_ssl("admin", certs)) as admin:
                    admin.create_topics([NewTopic(TOPIC, 1, 1)])
                return True
            except Exception:
                return False

        wait_until(created, 30, "a topic created by the super user through the broker")
        c.wait_partition(TOPIC, 0, lambda p: p["leader"] == 0, "a leader")
        yield c


def tls_connect(port: int, certs: Certs) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs.ca))
    return context.wrap_socket(connect(port, timeout_s=10), server_hostname="127.0.0.1")


def topics_seen_by_the_controller(cluster: LocalCluster) -> dict[str, Any]:
    """Each topic's partition count and configs, from the controller's own Metadata (read
    the way ``cluster status`` reads it: a broker login from the cluster secret)."""
    view = fetch_cluster_view(cluster.state)
    return {t["name"]: (len(t["partitions"]), sorted((c["name"], c["value"])
                                                     for c in t["configs"]))
            for t in view["topics"]}


# what the attack suite sent to the controller's port (each succeeded before)
ADMIN_REQUESTS: list[tuple[ApiKey, int, dict[str, Any]]] = [
    (ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                           "include_topic_authorized_operations": False}),
    (ApiKey.CREATE_TOPICS, 6, {"topics": [
        {"name": "rogue", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}], "timeout_ms": 5_000, "validate_only": False}),
    (ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": TOPIC, "count": 4,
                                               "assignments": None}],
                                   "timeout_ms": 5_000, "validate_only": False}),
    (ApiKey.ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": 2, "resource_name": TOPIC,
         "configs": [{"name": "retention.ms", "value": "1"}]}], "validate_only": False}),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": 2, "resource_name": TOPIC,
         "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}]}],
        "validate_only": False}),
    (ApiKey.DELETE_TOPICS, 5, {"topic_names": [TOPIC], "timeout_ms": 5_000}),
]


def test_the_controller_port_serves_no_client_api_without_a_broker_login(
        cluster: LocalCluster, certs: Certs) -> None:
    """Issue 30 item 1, raw frames over TLS: each admin request closes the connection
    unanswered and changes nothing; a client user (even a super user) cannot log in
    there, and a failed login does not open the door."""
    before = topics_seen_by_the_controller(cluster)
    assert set(before) == {TOPIC} and before[TOPIC][0] == 1, before
    port = cluster.state.controller.port
    for api, version, body in ADMIN_REQUESTS:
        with tls_connect(port, certs) as sock:
            assert call(sock, ApiKey.API_VERSIONS, 3, {})["error_code"] == 0  # still served
            assert closed_unanswered(sock, api, version, body), f"{api.name} was answered"
    with tls_connect(port, certs) as sock:  # the users' mechanisms are not offered
        answer = call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})
        assert answer["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer["mechanisms"] == ["SCRAM-SHA-256"]
    with tls_connect(port, certs) as sock:  # a user's login is not a broker's
        assert login(sock, "admin", PASSWORD.encode()) == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert closed_unanswered(sock, *ADMIN_REQUESTS[1])
    assert topics_seen_by_the_controller(cluster) == before
    secret = (Path(cluster.data_dir) / "cluster.secret").read_text().strip()
    with tls_connect(port, certs) as sock:  # a broker's login is served (brokers forward)
        assert login(sock, "broker-0", broker_password(secret, 0)) == 0
        answer = call(sock, ApiKey.METADATA, 12, ADMIN_REQUESTS[0][2])
        assert [t["name"] for t in answer["topics"]] == [TOPIC]


def test_confluent_kafka_reaches_the_controller_only_through_a_broker_and_its_acls(
        cluster: LocalCluster, certs: Certs) -> None:
    """librdkafka pointed at the controller's port (TLS, no login) gets no Metadata;
    through the broker, the same admin call is checked against the caller's ACLs before
    the broker forwards it: alice (no Alter on the topic) is refused, the super user's
    request reaches the controller."""
    controller = f"127.0.0.1:{cluster.state.controller.port}"
    stranger = AdminClient({"bootstrap.servers": controller, "security.protocol": "SSL",
                            "ssl.ca.location": str(certs.ca), "log_level": 0})
    with pytest.raises(KafkaException):  # before: the controller listed every topic
        stranger.list_topics(timeout=3)

    def admin_as(user: str) -> AdminClient:
        return AdminClient({"bootstrap.servers": cluster.bootstrap,
                            "security.protocol": "SASL_SSL",
                            "ssl.ca.location": str(certs.ca),
                            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user,
                            "sasl.password": PASSWORD})

    alice, admin = admin_as("alice"), admin_as("admin")
    with pytest.raises(KafkaException) as denied:
        alice.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC].result(30)
    assert denied.value.args[0].code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert topics_seen_by_the_controller(cluster)[TOPIC][0] == 1
    admin.create_partitions([NewPartitions(TOPIC, 2)])[TOPIC].result(30)
    assert topics_seen_by_the_controller(cluster)[TOPIC][0] == 2


def test_kafka_python_cannot_administer_through_the_controller_port(
        cluster: LocalCluster, certs: Certs) -> None:
    """kafka-python's client layer (its TLS connection and request classes, what its
    admin client sends with) aimed at the controller's port, with no login: creating,
    growing and deleting a topic all fail, and its admin client cannot even bootstrap
    (the controller's Metadata is not served).  Before, all of them succeeded."""
    before = topics_seen_by_the_controller(cluster)
    controller = f"127.0.0.1:{cluster.state.controller.port}"
    topic = CreateTopicsRequest.CreatableTopic
    grow = CreatePartitionsRequest.CreatePartitionsTopic
    attempts = [
        CreateTopicsRequest(topics=[topic(name="rogue", num_partitions=1,
                                          replication_factor=1)],
                            timeout_ms=5_000, validate_only=False),
        CreatePartitionsRequest(topics=[grow(name=TOPIC, count=4, assignments=None)],
                                timeout_ms=5_000, validate_only=False),
        DeleteTopicsRequest(topic_names=[TOPIC], timeout_ms=5_000),
    ]
    for attempt in attempts:  # each on a connection of its own
        client = KafkaNetClient(bootstrap_servers=controller, security_protocol="SSL",
                                ssl_cafile=str(certs.ca), request_timeout_ms=5_000)
        try:
            with pytest.raises(KafkaConnectionError, match="disconnected"):
                client.send_and_receive("bootstrap-0", attempt, timeout_ms=5_000)
        finally:
            client.close()
    with pytest.raises(KafkaError):  # its bootstrap Metadata is not answered
        KafkaAdminClient(bootstrap_servers=controller, security_protocol="SSL",
                         ssl_cafile=str(certs.ca), bootstrap_timeout_ms=3_000,
                         request_timeout_ms=3_000).close()
    assert topics_seen_by_the_controller(cluster) == before


def metadata_over_bound() -> dict[str, Any]:
    return {"topics": [{"name": f"t{i}"} for i in range(OVER)],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def fetch_over_bound() -> dict[str, Any]:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition": i, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1024} for i in range(OVER)]}],
            "forgotten_topics_data": [], "rack_id": ""}


def test_requests_over_their_bounds_are_not_answered_before_a_login(
        cluster: LocalCluster, certs: Certs) -> None:
    """Issue 30 item 3: on the broker's client port, its internal port and the
    controller's port, a Metadata naming 1,001 topics and a Fetch naming 1,001
    partitions close a connection that has not logged in (before, both were answered:
    the Metadata with the broker list).  After a login the bounds still answer them
    capped (no topic; INVALID_REQUEST)."""
    broker = cluster.state.brokers["0"]
    ports = {"client": broker.port, "internal": broker.internal_port,
             "controller": cluster.state.controller.port}
    for where, port in ports.items():
        for api, version, body in ((ApiKey.METADATA, 12, metadata_over_bound()),
                                   (ApiKey.FETCH, 12, fetch_over_bound())):
            with tls_connect(port, certs) as sock:  # a TLS port, served: ApiVersions
                assert call(sock, ApiKey.API_VERSIONS, 3, {})["error_code"] == 0
                assert closed_unanswered(sock, api, version, body), \
                    f"{api.name} answered on the {where} port"
    secret = (Path(cluster.data_dir) / "cluster.secret").read_text().strip()
    logins = {"client": ("admin", PASSWORD.encode()),
              "internal": ("broker-0", broker_password(secret, 0)),
              "controller": ("broker-0", broker_password(secret, 0))}
    for where, port in ports.items():
        with tls_connect(port, certs) as sock:
            assert login(sock, *logins[where]) == 0, where
            answer = call(sock, ApiKey.METADATA, 12, metadata_over_bound())
            assert answer["topics"] == [] and answer["brokers"], where
            answer = call(sock, ApiKey.FETCH, 12, fetch_over_bound())
            assert answer["error_code"] == ErrorCode.INVALID_REQUEST, where
            assert answer["responses"] == [], where


def test_kafka_python_gets_no_answer_over_a_bound_before_its_login(
        cluster: LocalCluster, certs: Certs) -> None:
    """kafka-python over TLS, no login, to the broker's client port: its Metadata
    naming 1,001 topics fails (before, it was answered with the broker list)."""
    client = KafkaNetClient(bootstrap_servers=cluster.bootstrap, security_protocol="SSL",
                            ssl_cafile=str(certs.ca), request_timeout_ms=5_000)
    asked = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=f"t{i}")
                                    for i in range(OVER)],
                            allow_auto_topic_creation=False)
    try:
        with pytest.raises(KafkaConnectionError, match="disconnected"):
            client.send_and_receive("bootstrap-0", asked, timeout_ms=5_000)
    finally:
        client.close()

