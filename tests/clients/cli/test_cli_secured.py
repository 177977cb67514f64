"""``minikafka`` against a secured cluster (issue 33): a SASL_SSL broker that requires a
login, reached by the admin commands, the console producer and consumer with a
properties file (``--command-config``, Kafka's names) or ``-X`` pairs; a wrong password
is an authentication error; without settings the CLI says at once what the listener
needs.  One broker with TLS and ``client_auth_required``, started and stopped by PID
(LocalCluster)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import wait_until
from tests.broker.test_client_auth import add_user
from tests.clients.cli.test_cli_operator import cli, one_line_error
from tests.tls_certs import Certs, make_certs

pytestmark = pytest.mark.multiprocess

USER, PASSWORD = "carol", "a long and secret password"
JAAS = ("org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="{user}" password="{password}";')


def properties(certs: Certs, password: str = PASSWORD) -> str:
    return ("# written as for Kafka's tools\n"
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.jaas.config={JAAS.format(user=USER, password=password)}\n"
            f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(Path(tmp_path_factory.mktemp("certs")))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Path:
    path = Path(tmp_path_factory.mktemp("client")) / "client.properties"
    path.write_text(properties(certs))
    return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("secured")), 1, {
            "ssl_certfile": certs.server_cert, "ssl_keyfile": certs.server_key,
            "ssl_cafile": certs.ca, "client_auth_required": "true",
            "max_failed_logins_per_user": 1000}) as c:
        added = add_user(c.data_dir, USER, PASSWORD)
        assert added.returncode == 0, added.stderr

        def logged_in() -> bool:  # brokers read the users file within a second
            try:
                with Admin(c.bootstrap, request_timeout_ms=5_000, security_protocol="SASL_SSL",
                           ssl_cafile=str(certs.ca), sasl_mechanism="SCRAM-SHA-256",
                           sasl_plain_username=USER, sasl_plain_password=PASSWORD) as admin:
                    admin.list_topics()
                return True
            except Exception:
                return False

        wait_until(logged_in, 30, "a login as the new user")
        yield c


def test_admin_commands_and_console_clients_with_a_properties_file(
        cluster: LocalCluster, config: Path, certs: Certs) -> None:  # fmt: skip
    at = ["--bootstrap-server", cluster.bootstrap]
    made = cli("topics", "create", "locked", "--partitions", "2", "--command-config",
               str(config), *at)
    assert made.returncode == 0 and "Created topic locked." in made.stdout, made.stderr
    listed = cli("topics", "--list", *at, "--command-config", str(config))
    assert listed.returncode == 0 and "locked" in listed.stdout.split(), listed.stderr
    produced = cli("produce", "--topic", "locked", "--producer.config", str(config),
                   "--producer-property", "linger.ms=0", *at, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = cli("consume", "locked", "--group", "auditors", "--from-beginning",
                   "--max-messages", "3", "--consumer.config", str(config), *at)
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["one", "three", "two"]
    groups = cli("groups", "list", "--command-config", str(config), *at)
    assert groups.returncode == 0 and "auditors" in groups.stdout, groups.stderr
    # Kafka's names as -X pairs, librdkafka's spellings (kcat's flag), after the action
    by_pairs = cli("topics", "describe", "locked", *at, "-X", "security.protocol=SASL_SSL",
                   "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", f"sasl.username={USER}",
                   "-X", f"sasl.password={PASSWORD}", "--command-property",
                   f"ssl.ca.location={certs.ca}")
    assert by_pairs.returncode == 0 and "PartitionCount: 2" in by_pairs.stdout, by_pairs.stderr
    # bootstrap.servers from the file when --bootstrap-server is not given
    with_bootstrap = config.with_name("with-bootstrap.properties")
    with_bootstrap.write_text(config.read_text() + f"bootstrap.servers={cluster.bootstrap}\n")
    described = cli("groups", "describe", "auditors", "--command-config", str(with_bootstrap))
    assert described.returncode == 0 and "locked" in described.stdout, described.stderr


def test_a_wrong_password_is_an_authentication_error_at_once(
        cluster: LocalCluster, config: Path, certs: Certs) -> None:  # fmt: skip
    wrong = config.with_name("wrong.properties")
    wrong.write_text(properties(certs, password="not the password"))
    for command in (["topics", "list"], ["produce", "locked"]):
        started = time.monotonic()
        result = cli(*command, "--command-config", str(wrong),
                     "--bootstrap-server", cluster.bootstrap, stdin="x\n")
        line = one_line_error(result)
        assert "SASL_AUTHENTICATION_FAILED" in line and "not the password" not in line
        assert time.monotonic() - started < 10


def test_without_settings_the_cli_says_what_the_listener_needs(
        cluster: LocalCluster, certs: Certs) -> None:  # fmt: skip
    at = ["--bootstrap-server", cluster.bootstrap]
    for command in (["topics", "list"], ["groups", "--list"], ["produce", "locked"],
                    ["consume", "locked"]):
        started = time.monotonic()
        line = one_line_error(cli(*command, *at, stdin="x\n"))
        assert line == (f"error: the broker at {cluster.bootstrap} requires TLS and a SASL "
                        "login: pass --command-config FILE with security.protocol=SASL_SSL, "
                        "ssl.ca.location, sasl.mechanism=SCRAM-SHA-256, sasl.username and "
                        "sasl.password"), line
        assert time.monotonic() - started < 10
    # TLS configured, no login: the first request after ApiVersions is closed
    tls_only = one_line_error(cli("topics", "list", *at, "-X", "security.protocol=SSL",
                                  "-X", f"ssl.ca.location={certs.ca}"))
    assert f"the broker at {cluster.bootstrap} requires a SASL login" in tls_only
    assert "security.protocol=SASL_SSL" in tls_only


def test_bad_settings_are_one_line_naming_the_setting(cluster: LocalCluster,
                                                      config: Path) -> None:
    at = ["--bootstrap-server", cluster.bootstrap]
    unknown = one_line_error(cli("topics", "list", "-X", "linger.ms=5", *at))
    assert unknown == "error: -X/--command-property: unknown Admin setting 'linger.ms'"
    broken = config.with_name("broken.properties")
    broken.write_text(config.read_text() + "sasl.password\n")
    line = one_line_error(cli("topics", "list", "--command-config", str(broken), *at))
    assert f"{broken}:8: 'sasl.password' has no '='" in line, line


def test_a_tls_listener_without_logins_gets_the_tls_hint(
        tmp_path: Path, certs: Certs) -> None:  # fmt: skip
    with LocalCluster(tmp_path, 1, {"ssl_certfile": certs.server_cert,
                                    "ssl_keyfile": certs.server_key,
                                    "ssl_cafile": certs.ca}) as tls:
        at = ["--bootstrap-server", tls.bootstrap]
        line = one_line_error(cli("topics", "list", *at))
        assert line == (f"error: the broker at {tls.bootstrap} requires TLS: pass "
                        "--command-config FILE with security.protocol=SSL and "
                        "ssl.ca.location"), line
        listed = cli("topics", "list", *at, "-X", "security.protocol=SSL", "-X",
                     f"ssl.ca.location={certs.ca}")
        assert listed.returncode == 0, listed.stderr
