from pathlib import Path

import pytest

from broker.config import BrokerConfig
from clients.protocol.errors import InvalidConfigError


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
        ("just a line\n", ":1: expected key=value"),
        ("num_network_processes=0\n", "num_network_processes must be positive"),
        ("max_request_bytes=104857600\n", "at most half of buffer_pool_bytes"),
        ("auto_create_topics_enable=maybe\n", "must be true or false"),
    ],
)
def test_bad_config_is_a_precise_error(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(InvalidConfigError) as info:
        BrokerConfig.load(path)
    assert fragment in str(info.value)


def test_missing_file_is_a_precise_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "missing.properties")
