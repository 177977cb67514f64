"""Client users: SCRAM logins on a cluster with ``client_auth_required``, judged by real
clients (confluent-kafka, kafka-python) and ours; nothing is served before a login.

One cluster for the module (3 brokers, the users file beside ``cluster.json``); the
user is added with ``minikafka cluster add-user`` after the start, as an operator would
(brokers re-read the file).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer

from broker.users import USERS_FILE
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import AuthenticationError, InvalidConfigError
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.raw_kafka import connect, request

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]
USER, PASSWORD = "alice", "correct horse battery"
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": USER, "sasl_plain_password": PASSWORD}


def add_user(data_dir: str, name: str, password: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cluster", "add-user", name, "--password-stdin",
         "--data-dir", data_dir], input=password + "\n", capture_output=True, text=True,
        timeout=60, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # this module's wrong-password tests (librdkafka retries a refused login) must not
    # lock USER out for the tests after them: lockouts are tested in test_login_guessing
    with LocalCluster(Path(tmp_path_factory.mktemp("client-auth")), 3,
                      {"client_auth_required": "true",
                       "max_failed_logins_per_user": 1000}) as c:
        added = add_user(c.data_dir, USER, PASSWORD)
        assert added.returncode == 0, added.stderr
        assert (Path(c.data_dir) / USERS_FILE).stat().st_mode & 0o777 == 0o600

        def created() -> bool:  # brokers read the users file within a second
            try:
                with Admin(c.bootstrap, request_timeout_ms=5_000, **SASL) as admin:
                    admin.create_topics([NewTopic("secure", 1, 3)])
                return True
            except AuthenticationError:
                return False

        wait_until(created, 30, "a login as the new user")
        c.wait_partition("secure", 0, lambda p: len(p["isr"]) == 3, "full ISR")
        yield c


def closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_nothing_but_api_versions_and_sasl_before_a_login(cluster: LocalCluster) -> None:
    port = cluster.state.brokers["0"].port
    with connect(port, timeout_s=10) as sock:  # ApiVersions is answered
        sock.sendall(request(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"}))
        assert sock.recv(4)
    with connect(port, timeout_s=10) as sock:  # Metadata is not: the connection closes
        sock.sendall(request(ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}))
        assert closed_without_answer(sock)


def test_our_clients_log_in_and_a_wrong_password_fails_fast(cluster: LocalCluster) -> None:
    with Producer(cluster.bootstrap, acks="all", **SASL) as producer:
        metas = [producer.send("secure", b"ours-%d" % i).result(30) for i in range(20)]
    with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                  **{**SASL, "sasl_mechanism": "SCRAM-SHA-512"}) as consumer:
        consumer.assign([TopicPartition("secure", 0)])
        got: list[bytes] = []
        wait_until(lambda: bool(got.extend(
            r.value for rs in consumer.poll(200).values() for r in rs) or
            len(got) >= 20), 30, "20 records")
    assert b"ours-19" in got and metas[-1].offset >= 19
    with Consumer(cluster.bootstrap, group_id="secure-ours", auto_offset_reset="earliest",
                  heartbeat_interval_ms=300, **SASL) as member:  # coordinator + heartbeats
        member.subscribe(["secure"])
        grouped: list[bytes] = []
        wait_until(lambda: bool(grouped.extend(
            r.value for rs in member.poll(200).values() for r in rs) or
            b"ours-19" in grouped), 30, "records through the group")
        member.commit()
    started = time.monotonic()
    with Producer(cluster.bootstrap, max_block_ms=30_000,
                  **{**SASL, "sasl_plain_password": "wrong password"}) as bad, \
            pytest.raises(AuthenticationError, match="refused"):
        bad.send("secure", b"never").result(30)
    assert time.monotonic() - started < 10  # not after max_block_ms
    with pytest.raises(InvalidConfigError, match="sasl_mechanism"):
        Producer(cluster.bootstrap, **{**SASL, "sasl_mechanism": "PLAIN"})


def test_confluent_kafka_logs_in_with_scram(cluster: LocalCluster) -> None:
    config: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": PASSWORD}
    producer = ConfluentProducer({**config, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for i in range(50):
        producer.produce("secure", b"confluent-%d" % i,
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert producer.flush(30) == 0 and errors == []
    consumer = ConfluentConsumer({**config, "group.id": "secure-confluent",
                                  "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["secure"])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while sum(v.startswith(b"confluent-") for v in got) < 50:
            assert time.monotonic() < deadline, f"{len(got)} records read"
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    wrong = ConfluentProducer({**config, "sasl.password": "wrong password",
                               "message.timeout.ms": 3000})
    failures: list[Any] = []
    wrong.produce("secure", b"never", on_delivery=lambda err, _m: failures.append(err))
    wrong.flush(10)
    assert failures and failures[0] is not None  # refused, never delivered


def test_kafka_python_logs_in_with_scram_sha_512(cluster: LocalCluster) -> None:
    config: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap, "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD}
    producer = KafkaProducer(acks="all", **config)
    try:
        for i in range(30):
            producer.send("secure", b"kp-%d" % i).get(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False,
                             **config)
    try:
        consumer.assign([__import__("kafka").TopicPartition("secure", 0)])
        got: list[bytes] = []
        wait_until(lambda: bool(got.extend(
            r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs) or
            sum(v.startswith(b"kp-") for v in got) >= 30), 30, "30 kafka-python records")
    finally:
        consumer.close()


def test_add_user_refuses_bad_names_and_short_passwords(cluster: LocalCluster) -> None:
    for name, password in (("broker-7", "long enough pw"), ("a b", "long enough pw"),
                           ("bob", "short")):
        result = add_user(cluster.data_dir, name, password)
        assert result.returncode == 1 and "error:" in result.stderr, (name, result.stderr)
