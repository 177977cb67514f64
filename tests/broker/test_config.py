from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig
from clients.protocol.errors import InvalidConfigError
from tests.tls_certs import make_certs


def test_defaults_are_valid_and_bind_loopback() -> None:
    config = BrokerConfig().validate()
    assert config.host == "127.0.0.1"
    assert config.advertised == ("127.0.0.1", 9092)


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("# comment\nport=9500\nsegment.bytes = 2048\nauto.create.topics.enable=true\n")
    config = BrokerConfig.load(path, {"port": "9600"})
    assert config.port == 9600
    assert config.segment_bytes == 2048
    assert config.auto_create_topics_enable is True


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("port=abc\n", "port must be an integer"),
        ("no_such_key=1\n", "unknown broker config key 'no_such_key'"),
        ("just_a_line\n", ":1: 'just_a_line' has no '=' and no value"),
        ("port=1\nport=2\n", ":2: 'port' is set twice (first on line 1)"),
        ("num_network_processes=0\n", "num_network_processes must be positive"),
        ("max_request_bytes=104857600\n", "at most half of buffer_pool_bytes"),
        ("auto_create_topics_enable=maybe\n", "must be true or false"),
        ("internal_port=-2\n", "internal_port must be -1 (none)"),
        ("port=9500\ninternal_port=9500\n", "internal_port must differ from port"),
        ("max_internal_connections=0\n", "max_internal_connections must be positive"),
        ("group_consumer_heartbeat_interval_ms=45000\n",
         "group_consumer_heartbeat_interval_ms must be below group_consumer_session_timeout_ms"),
    ],
)
def test_bad_config_is_a_precise_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(InvalidConfigError) as info:
        BrokerConfig.load(path)
    assert fragment in str(info.value)


def test_missing_file_is_a_precise_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match=r"cannot read .*missing\.properties"):
        BrokerConfig.load(tmp_path / "missing.properties")


def test_a_broker_reachable_from_other_machines_needs_logins_or_an_explicit_waiver() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        BrokerConfig(host=host).validate()  # loopback: everything off by default
    for host in ("0.0.0.0", "10.1.2.3", "::", "broker.example.com"):
        with pytest.raises(InvalidConfigError, match="client_auth_required=true"):
            BrokerConfig(host=host).validate()
        BrokerConfig(host=host, client_auth_required=True, sasl_users_file="u").validate()
        BrokerConfig(host=host, allow_anonymous_remote=True).validate()
        with pytest.raises(InvalidConfigError, match="cluster_secret_file"):
            BrokerConfig(host=host, allow_anonymous_remote=True,
                         controller_address="10.0.0.1:9093").validate()
        BrokerConfig(host=host, allow_anonymous_remote=True, cluster_secret_file="s",
                     controller_address="10.0.0.1:9093").validate()


def test_an_internal_listener_reachable_from_other_machines_needs_the_cluster_secret(
) -> None:
    cluster = {"controller_address": "127.0.0.1:9192", "internal_port": 9292}
    BrokerConfig(**cluster).validate()  # loopback
    with pytest.raises(InvalidConfigError,
                       match=r"'10\.1\.2\.3' is reachable.*cluster_secret_file"):
        BrokerConfig(**cluster, internal_host="10.1.2.3").validate()
    config = BrokerConfig(**cluster, internal_host="10.1.2.3",
                          cluster_secret_file="s").validate()
    assert config.internal_advertised == ("10.1.2.3", 9292)
    wildcard = BrokerConfig(**cluster, internal_host="0.0.0.0", cluster_secret_file="s",
                            advertised_host="broker-1.example").validate()
    assert wildcard.internal_advertised == ("broker-1.example", 9292)  # not 0.0.0.0
    assert BrokerConfig().internal_advertised is None


def test_a_controller_reachable_from_other_machines_needs_the_cluster_secret() -> None:
    ControllerConfig(host="127.0.0.1").validate()
    with pytest.raises(InvalidConfigError, match="cluster_secret_file"):
        ControllerConfig(host="0.0.0.0").validate()
    ControllerConfig(host="0.0.0.0", cluster_secret_file="secret").validate()


def test_controller_tls_settings_are_checked_when_the_config_is_read(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    tls = ControllerConfig().with_overrides({
        "ssl_certfile": str(certs.server_cert), "ssl_keyfile": str(certs.server_key),
        "ssl_cafile": str(certs.ca), "ssl_client_auth": "required"})
    assert tls.tls_context() is not None
    assert ControllerConfig().tls_context() is None
    with pytest.raises(InvalidConfigError, match="ssl_certfile"):
        ControllerConfig().with_overrides({"ssl_certfile": str(tmp_path / "missing.pem")})
    with pytest.raises(InvalidConfigError, match="need ssl_certfile"):
        ControllerConfig().with_overrides({"ssl_keyfile": str(certs.server_key)})
    with pytest.raises(InvalidConfigError, match="ssl_client_auth"):
        ControllerConfig().with_overrides({"ssl_certfile": str(certs.server_cert),
                                           "ssl_keyfile": str(certs.server_key),
                                           "ssl_client_auth": "sometimes"})
