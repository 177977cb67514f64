"""Password guessing and user-name enumeration against real processes: issue 30 items 4
and 5, judged with raw SCRAM frames and kafka-python.

Before: 397 wrong SCRAM proofs per second went through on one connection, which stayed
open, and nothing counted them; an unknown user got a new random salt on every attempt
while a real user's was fixed, so two attempts told which names exist.  Now a failed
login is answered ``connection_failed_authentication_delay_ms`` (100 ms) later and its
connection closed; a name or an address with too many failures in the window is locked
out (its logins fail whatever the password, answered like a wrong one), except the
cluster's own brokers; and an unknown name gets the same salt and iteration count every
time (from the cluster secret, or a key kept in the data dir), in a real user's form.

The single-broker tests connect from several loopback addresses (127.0.0.2, ...: Linux
routes all of 127/8 to lo) to show what is counted per name and what per address.
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaError
from kafka.net.compat import KafkaNetClient
from kafka.protocol.metadata import MetadataRequest

from broker.cluster.status import fetch_cluster_view
from broker.users import add_user
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.scram import DEFAULT_ITERATIONS, SALT_BYTES, ScramClient
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import call, closed_by_peer
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.multiprocess

PASSWORD = "the right password"
DELAY_S = 0.1  # connection_failed_authentication_delay_ms's default
FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED
PER_USER, PER_ADDRESS = 3, 5


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    users = tmp_path / "users.scram"
    for name in ("alice", "bob"):
        add_user(users, name, PASSWORD.encode())
    with BrokerProcess(tmp_path / "data", overrides={
            "client_auth_required": "true", "sasl_users_file": users,
            "max_failed_logins_per_user": PER_USER,
            "max_failed_logins_per_address": PER_ADDRESS}) as b:
        yield b


def connect_from(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def server_first(sock: socket.socket, user: str,
                 mechanism: str = "SCRAM-SHA-256") -> tuple[ScramClient, bytes]:
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    client = ScramClient(mechanism, user, b"a guess")
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    assert first["error_code"] == 0
    return client, bytes(first["auth_bytes"])


def salt_of(sock: socket.socket, user: str, mechanism: str = "SCRAM-SHA-256"
            ) -> tuple[bytes, int]:
    """What the server answers ``user``'s first SCRAM message: (salt, iterations)."""
    _client, first = server_first(sock, user, mechanism)
    attrs = dict(part.split("=", 1) for part in first.decode().split(","))
    return base64.b64decode(attrs["s"]), int(attrs["i"])


def login(sock: socket.socket, user: str, password: str) -> tuple[int, float]:
    """A SCRAM-SHA-256 login: the last error code, and how long its final answer took."""
    assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})[
        "error_code"] == 0
    client = ScramClient("SCRAM-SHA-256", user, password.encode())
    first = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    assert first["error_code"] == 0
    started = time.monotonic()
    final = call(sock, ApiKey.SASL_AUTHENTICATE, 2,
                 {"auth_bytes": client.final(bytes(first["auth_bytes"]))})
    return int(final["error_code"]), time.monotonic() - started


def login_from(port: int, source: str, user: str, password: str) -> int:
    with connect_from(port, source) as sock:
        return login(sock, user, password)[0]


# ---------------------------------------------------------------- item 4: guessing


def test_a_wrong_proof_is_answered_late_and_its_connection_closed(
        broker: BrokerProcess) -> None:
    with connect_from(broker.port) as sock:
        code, waited = login(sock, "alice", "a guess")
        assert code == FAILED
        assert waited >= DELAY_S * 0.95, f"answered after {waited * 1000:.1f} ms"
        # before: the connection stayed open for the next guess (397 per second)
        assert closed_by_peer(sock, 10), "the connection stayed open after a failed login"
    with connect_from(broker.port) as sock:  # one failure is under every bound
        assert login(sock, "alice", PASSWORD)[0] == 0
        assert call(sock, ApiKey.METADATA, 12, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})["brokers"]


def test_failures_lock_out_the_name_from_everywhere_then_the_address_for_everyone(
        broker: BrokerProcess) -> None:
    port = broker.port
    for source in ("127.0.0.2", "127.0.0.3", "127.0.0.2"):
        assert login_from(port, source, "alice", "a guess") == FAILED
    # alice is locked out: her right password fails, answered like a wrong one, from an
    # address that never failed; bob is not
    with connect_from(port, "127.0.0.4") as sock:
        code, waited = login(sock, "alice", PASSWORD)
        assert code == FAILED and waited >= DELAY_S * 0.95
    assert login_from(port, "127.0.0.4", "bob", PASSWORD) == 0
    wait_until(lambda: "3 failed logins for user 'alice'" in "".join(broker.output), 10,
               "the lockout's log line")
    # an address that guesses names (unknown ones count like real ones) is locked out
    for i in range(PER_ADDRESS):
        assert login_from(port, "127.0.0.5", f"guess-{i}", "a guess") == FAILED
    assert login_from(port, "127.0.0.5", "bob", PASSWORD) == FAILED
    assert login_from(port, "127.0.0.6", "bob", PASSWORD) == 0
    wait_until(lambda: "failed logins for address '127.0.0.5'" in "".join(broker.output),
               10, "the address lockout's log line")


def test_kafka_python_guessing_a_password_is_slowed_then_locked_out(
        broker: BrokerProcess) -> None:
    """kafka-python as a guessing script: each wrong password costs a new connection and
    the delay; after the bound the right password is refused too (before: accepted)."""

    def metadata_as(user: str, password: str) -> tuple[bool, float]:
        client = KafkaNetClient(bootstrap_servers=broker.bootstrap,
                                security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                                sasl_plain_password=password, request_timeout_ms=5_000)
        started = time.monotonic()
        try:
            client.send_and_receive("bootstrap-0", MetadataRequest(
                topics=None, allow_auto_topic_creation=False), timeout_ms=5_000)
            return True, time.monotonic() - started
        except KafkaError:
            return False, time.monotonic() - started
        finally:
            client.close()

    for guess in ("password", "123456", "alice2024"):
        served, took = metadata_as("alice", guess)
        assert not served and took >= DELAY_S * 0.95, (guess, took)
    wait_until(lambda: "failed logins for user 'alice'" in "".join(broker.output), 10,
               "alice locked out")
    assert metadata_as("alice", PASSWORD)[0] is False  # refused within the lockout
    assert metadata_as("bob", PASSWORD)[0] is True  # 127.0.0.1 is not locked out


def test_failed_logins_waiting_for_their_answer_are_bounded(tmp_path: Path) -> None:
    """With ``max_delayed_authentication_failures`` = 1 and a 3 s delay, a second failure
    while the first waits is answered and closed at once: waiting answers never pile
    up (each holds a place among the network process's queued requests)."""
    users = tmp_path / "users.scram"
    add_user(users, "alice", PASSWORD.encode())
    with BrokerProcess(tmp_path / "data", overrides={
            "client_auth_required": "true", "sasl_users_file": users,
            "connection_failed_authentication_delay_ms": 3_000,
            "max_delayed_authentication_failures": 1},
            extra_args=["--log-level", "INFO"]) as b:  # failures are logged at INFO
        first, second = connect_from(b.port, "127.0.0.2"), connect_from(b.port, "127.0.0.3")
        with first, second:
            waits: list[float] = []
            late = threading.Thread(target=lambda: waits.append(
                login(first, "alice", "a guess")[1]))
            late.start()
            wait_until(lambda: "failed login 'alice'" in "".join(b.output), 10,
                       "the first failure logged")
            code, waited = login(second, "alice", "another guess")
            assert code == FAILED and waited < 2.0  # not delayed: the bound is taken
            assert closed_by_peer(second, 10)
            late.join(30)
            assert waits and waits[0] >= 3.0 * 0.95


# ---------------------------------------------------------------- item 5: enumeration


def test_an_unknown_name_gets_the_same_salt_every_time_in_a_real_users_form(
        broker: BrokerProcess) -> None:
    answers: dict[tuple[str, str], set[tuple[bytes, int]]] = {}
    for _attempt in range(3):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            for user in ("alice", "mallory"):
                with connect_from(broker.port) as sock:
                    answers.setdefault((user, mechanism), set()).add(
                        salt_of(sock, user, mechanism))
    # before: mallory got a new random salt on each attempt, alice always the same one
    assert all(len(seen) == 1 for seen in answers.values()), answers
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        ((real_salt, real_iterations),) = answers[("alice", mechanism)]
        ((fake_salt, fake_iterations),) = answers[("mallory", mechanism)]
        assert len(fake_salt) == len(real_salt) == SALT_BYTES
        assert fake_iterations == real_iterations == DEFAULT_ITERATIONS
    # and after a restart (no cluster secret: the key is kept in the data dir)
    broker.stop()
    broker.start()
    with connect_from(broker.port) as sock:
        assert {salt_of(sock, "mallory")} == answers[("mallory", "SCRAM-SHA-256")]


# ---------------------------------------------------------------- a TLS cluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("guessing")), 2, {
            "ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key,
            "ssl_cafile": certs.ca, "client_auth_required": "true"}) as c:
        yield c


def tls_connect(port: int, certs: Certs) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs.ca))
    return context.wrap_socket(connect_from(port), server_hostname="127.0.0.1")


@pytest.mark.slow
def test_guessing_on_the_controller_is_slowed_and_never_locks_the_brokers_out(
        cluster: LocalCluster, certs: Certs) -> None:
    port = cluster.state.controller.port
    with tls_connect(port, certs) as sock:  # a wrong broker login: late, then closed
        code, waited = login(sock, "broker-0", "a guess")
        assert code == FAILED and waited >= DELAY_S * 0.95
        assert closed_by_peer(sock, 10)
    # 40 guesses from 127.0.0.1, the brokers' own address: broker names (never counted)
    # and "admin" (locked out at the controller after 10); 127.0.0.1 is shared by every
    # local client (failed_login_shared_addresses), so it is never locked out itself
    errors: list[Any] = []

    def guess(names: list[str]) -> None:
        try:
            for name in names:
                with tls_connect(port, certs) as sock:
                    errors.append(login(sock, name, "a guess")[0])
        except Exception as exc:  # reported below (a thread)
            errors.append(exc)

    names = [f"broker-{i % 2}" for i in range(8)] + ["admin"] * 32
    threads = [threading.Thread(target=guess, args=(names[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [FAILED] * 40
    controller_log = Path(cluster.state.controller.log_file)
    wait_until(lambda: "failed logins for user 'admin'" in controller_log.read_text(),
               10, "the controller's lockout of the guessed name")
    assert "failed logins for address '127.0.0.1'" not in controller_log.read_text()
    # the brokers still log in from 127.0.0.1: status reads the controller as broker-0, a
    # restarted broker logs in, registers and is unfenced
    assert {b["node_id"] for b in fetch_cluster_view(cluster.state)["brokers"]} == {0, 1}
    broker_log = Path(cluster.state.brokers["1"].log_file)
    registrations = broker_log.read_text().count("registered with the controller")
    cluster.restart("1")

    def registered_again() -> bool:
        if broker_log.read_text().count("registered with the controller") <= registrations:
            return False
        brokers = fetch_cluster_view(cluster.state)["brokers"]
        return any(b["node_id"] == 1 and not b["fenced"] for b in brokers)

    wait_until(registered_again, 60, "broker 1 registered again after its restart")


@pytest.mark.slow
def test_the_brokers_of_a_cluster_answer_an_unknown_name_alike(
        cluster: LocalCluster, certs: Certs) -> None:
    """With a cluster secret every node derives the same decoy: asking each broker (and
    the broker again after a restart) tells nothing a real user's answer would not."""
    ports = [info.port for info in cluster.state.brokers.values()]
    answers = set()
    for port in ports:
        with tls_connect(port, certs) as sock:
            answers.add(salt_of(sock, "mallory"))
    assert len(answers) == 1, answers
