"""A client command's settings (clients/cli/connect/settings.py): the properties file,
then ``-X`` pairs, through the command's table of Kafka's names; errors name the file
or option and the setting, never a password."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings, client_settings
from clients.config.kafka_names import ADMIN, CONSUMER, PRODUCER

LOGIN = ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
         "sasl.username=alice\nsasl.password=from the file\n")


def args(path: Path | None = None, *pairs: str, **extra: object) -> argparse.Namespace:
    return argparse.Namespace(command_config=str(path) if path else None,
                              command_property=list(pairs), **extra)


def test_pairs_override_the_file_setting_by_setting(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(LOGIN + "request.timeout.ms=9000\nbootstrap.servers=h:1\n")
    got = client_settings(args(config, "sasl.password=from -X", "linger.ms=3",
                               client_names=PRODUCER))
    assert got == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
                   "sasl_plain_username": "alice", "sasl_plain_password": "from -X",
                   "request_timeout_ms": 9000, "bootstrap_servers": "h:1", "linger_ms": 3}
    # an Admin built by the command takes the connection settings only, no bootstrap
    assert admin_settings(args(client_settings=got)) == {
        k: v for k, v in got.items() if k not in ("linger_ms", "bootstrap_servers")}


@pytest.mark.parametrize(("text", "pairs", "names", "message"), [
    ("", ["fetch.max.wait.ms=5"], PRODUCER,
     "--producer-property: unknown Producer setting 'fetch.max.wait.ms'"),
    ("", ["linger.ms=5"], CONSUMER, "--consumer-property: unknown Consumer setting"),
    ("acks=all\n", [], ADMIN, "--command-config {path}: unknown Admin setting 'acks'"),
    ("sasl.password=hunter2\nsasl.password=hunter3\n", [], ADMIN,
     "--command-config {path}:2: 'sasl.password' is set twice"),
    ("", ["sasl.password"], ADMIN, "-X/--command-property takes KEY=VALUE, got "
                                   "'sasl.password'"),
    ("security.protocol=SASL_SSL\nsasl.username=a\nsasl.password=hunter2\n", [], ADMIN,
     "security.protocol=SASL_SSL needs sasl.mechanism"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", [], ADMIN,
     "needs sasl.username and sasl.password"),
])
def test_errors_name_where_and_what(tmp_path: Path, text: str, pairs: list[str],
                                    names: object, message: str) -> None:
    config = tmp_path / "client.properties"
    config.write_text(text)
    with pytest.raises(CliError) as caught:
        client_settings(args(config if text else None, *pairs, client_names=names))
    assert message.format(path=config) in str(caught.value)
    assert "hunter" not in str(caught.value)
