"""TLS on the broker's port, judged by real clients (confluent-kafka, kafka-python) and
ours: SASL_SSL on a 3-broker cluster (replication and broker logins inside TLS), SSL with
required client certificates on a standalone broker, and the transport's edge cases
(pipelined requests buffered in user space, a length prefix split across TLS records, a
plaintext client, a client that trusts another CA).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import api_versions, connect, recv_exact, request
from tests.broker.test_client_auth import PASSWORD, USER, add_user
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.multiprocess

TOPIC = "sealed"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("tls")), 3, {
            "ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key,
            "ssl_cafile": certs.ca, "client_auth_required": "true"}) as c:
        added = add_user(c.data_dir, USER, PASSWORD)
        assert added.returncode == 0, added.stderr

        def created() -> bool:  # brokers read the users file within a second
            try:
                with Admin(c.bootstrap, request_timeout_ms=5_000, **ours(certs)) as admin:
                    admin.create_topics([NewTopic(TOPIC, 1, 3, {"min.insync.replicas": "2"})])
                return True
            except Exception:
                return False

        wait_until(created, 30, "a topic created over SASL_SSL")
        c.wait_partition(TOPIC, 0, lambda p: len(p["isr"]) == 3,
                         "full ISR: followers replicate over TLS")
        yield c


def ours(certs: Certs) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", "ssl_cafile": str(certs.ca),
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": USER,
            "sasl_plain_password": PASSWORD}


def confluent(cluster: LocalCluster, certs: Certs) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": USER, "sasl.password": PASSWORD}


def test_confluent_kafka_over_sasl_ssl_with_replication(cluster: LocalCluster,
                                                       certs: Certs) -> None:
    config = confluent(cluster, certs)
    producer = ConfluentProducer({**config, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    values = [b"confluent-%d-" % i + b"x" * 500 for i in range(3000)]  # > one TLS record
    for value in values:
        producer.produce(TOPIC, value,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    consumer = ConfluentConsumer({**config, "group.id": "tls-confluent",
                                  "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        got: set[bytes] = set()
        deadline = time.monotonic() + 60
        while not set(values) <= got:
            assert time.monotonic() < deadline, f"{len(got)} records read"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add(msg.value())
    finally:
        consumer.close()
    # acks=all with min ISR 2 acknowledged them: followers fetched them over TLS
    assert len(cluster.partition(TOPIC, 0)["isr"]) >= 2
    # cluster status reaches TLS brokers that require logins (as each broker's operator)
    offsets = cluster.partition(TOPIC, 0)["replica_offsets"]
    assert all(o is not None and o["leo"] >= 3000 for o in offsets.values()), offsets


def test_our_clients_and_kafka_python_over_sasl_ssl(cluster: LocalCluster,
                                                   certs: Certs) -> None:
    with Producer(cluster.bootstrap, acks="all", **ours(certs)) as producer:
        metas = [producer.send(TOPIC, b"ours-%d" % i) for i in range(200)]
        producer.flush()
        assert all(m.result(30).offset >= 0 for m in metas)
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest", **ours(certs)) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got: list[bytes] = []
        wait_until(lambda: bool(got.extend(
            r.value for rs in consumer.poll(200).values() for r in rs) or
            b"ours-199" in got), 60, "our records back over TLS")
    kafka_config: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap, "security_protocol": "SASL_SSL",
        "ssl_cafile": str(certs.ca), "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}
    kp = KafkaProducer(acks="all", **kafka_config)
    try:
        for i in range(100):
            kp.send(TOPIC, b"kafka-python-%d" % i)
        kp.flush(60)
    finally:
        kp.close(10)
    kc = KafkaConsumer(auto_offset_reset="earliest", consumer_timeout_ms=1000, **kafka_config)
    try:
        kc.assign([KafkaTopicPartition(TOPIC, 0)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        while b"kafka-python-99" not in seen:
            assert time.monotonic() < deadline, f"{len(seen)} records read"
            seen.extend(m.value for ms in kc.poll(500).values() for m in ms)
    finally:
        kc.close()


def _tls_socket(port: int, certs: Certs, **cert: str) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert:
        context.load_cert_chain(cert["certfile"], cert["keyfile"])
    return context.wrap_socket(connect(port, timeout_s=10), server_hostname="127.0.0.1")


def _answers(sock: ssl.SSLSocket, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        size = int.from_bytes(recv_exact(sock, 4), "big")
        ids.append(int.from_bytes(recv_exact(sock, size)[:4], "big"))
    return ids


def _refused_without_answer(port: int, certs: Certs) -> bool:
    """The handshake fails or (TLS 1.3: the server checks the client's certificate after
    the client finished) the connection closes before any answer."""
    try:
        with _tls_socket(port, certs) as sock:
            sock.sendall(api_versions())
            return sock.recv(4) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_the_controller_port_speaks_tls_in_a_tls_cluster(cluster: LocalCluster,
                                                          certs: Certs) -> None:
    """The brokers registered and replicate through a TLS controller port (the fixture's
    full ISR; ``cluster status`` reads the controller over TLS); a plaintext client gets
    no answer from it."""
    port = cluster.state.controller.port
    with connect(port, timeout_s=10) as plain:  # Kafka bytes on a TLS port
        plain.sendall(api_versions())
        with contextlib.suppress(ConnectionResetError):
            assert plain.recv(64) == b""  # closed: not a TLS ClientHello
    with _tls_socket(port, certs) as sock:  # the cluster's CA vouches for it
        sock.sendall(api_versions(correlation_id=42))
        assert _answers(sock, 1) == [42]
    assert {b["node_id"] for b in cluster.report()["brokers"] if not b["fenced"]} == {0, 1, 2}


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory,
                certs: Certs) -> Iterator[BrokerProcess]:
    with BrokerProcess(Path(tmp_path_factory.mktemp("mtls")), overrides={
            "ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key,
            "ssl_cafile": certs.ca, "ssl_client_auth": "required"}) as broker:
        yield broker


def test_pipelined_requests_and_split_length_prefixes_are_all_answered(
        mtls_broker: BrokerProcess, certs: Certs) -> None:
    """Requests that arrive in one TLS record sit decrypted in the broker's user space,
    where epoll cannot see them: each must still be answered, in order."""
    cert = {"certfile": str(certs.client_cert), "keyfile": str(certs.client_key)}
    with _tls_socket(mtls_broker.port, certs, **cert) as sock:
        burst = b"".join(api_versions(correlation_id=i) for i in range(300))
        sock.sendall(burst)  # one write: a handful of TLS records, 300 requests
        assert _answers(sock, 300) == list(range(300))
        frame = api_versions(correlation_id=7777)
        for piece in (frame[:1], frame[1:3], frame[3:9], frame[9:]):  # one record each
            sock.sendall(piece)
        assert _answers(sock, 1) == [7777]


def test_client_certificates_plaintext_clients_and_strangers_are_refused(
        mtls_broker: BrokerProcess, certs: Certs, tmp_path: Path) -> None:
    port = mtls_broker.port
    started = time.monotonic()
    with connect(port, timeout_s=10) as plain:  # Kafka bytes on a TLS port
        plain.sendall(api_versions())
        with contextlib.suppress(ConnectionResetError):
            assert plain.recv(64) == b""  # closed: not a TLS ClientHello
    assert _refused_without_answer(port, certs)  # no client certificate
    stranger = make_certs(tmp_path / "other-ca")
    with pytest.raises(ssl.SSLCertVerificationError):  # the broker's CA is not trusted
        _tls_socket(port, stranger).close()
    assert time.monotonic() - started < 10  # every refusal is prompt, nothing hangs
    with Producer(mtls_broker.bootstrap, security_protocol="SSL", ssl_cafile=str(certs.ca),
                  ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key),
                  acks=1) as producer:
        with Admin(mtls_broker.bootstrap, security_protocol="SSL", ssl_cafile=str(certs.ca),
                   ssl_certfile=str(certs.client_cert),
                   ssl_keyfile=str(certs.client_key)) as admin:
            admin.create_topics([NewTopic("mtls", 1, 1)])
        assert producer.send("mtls", b"with a certificate").result(30).offset == 0
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass  # the broker still accepts after all of that
    with _tls_socket(port, certs, certfile=str(certs.client_cert),
                     keyfile=str(certs.client_key)) as sock:
        sock.sendall(request(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"}, 5))
        assert _answers(sock, 1) == [5]


def test_sasl_plain_inside_tls_with_librdkafka_and_ours(cluster: LocalCluster,
                                                       certs: Certs) -> None:
    """PLAIN sends the password itself: offered on TLS ports only, checked against the
    user's stored SCRAM keys (the users file keeps no passwords)."""
    plain = {**confluent(cluster, certs), "sasl.mechanisms": "PLAIN"}
    producer = ConfluentProducer({**plain, "acks": "all"})
    errors: list[Any] = []
    for i in range(20):
        producer.produce(TOPIC, b"plain-%d" % i,
                         on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []
    with Producer(cluster.bootstrap, acks="all",
                  **{**ours(certs), "sasl_mechanism": "PLAIN"}) as ours_plain:
        assert ours_plain.send(TOPIC, b"ours over PLAIN").result(30).offset >= 20
    wrong = {**ours(certs), "sasl_mechanism": "PLAIN", "sasl_plain_password": "not it!!"}
    with Producer(cluster.bootstrap, max_block_ms=10_000, **wrong) as bad, \
            pytest.raises(AuthenticationError, match="refused"):
        bad.send(TOPIC, b"never").result(30)
