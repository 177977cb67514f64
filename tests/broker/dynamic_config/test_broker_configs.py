"""Dynamic broker configs: the checks of a request's changes, the persisted overrides
and their listeners (broker.dynamic_config.broker_configs), and DescribeConfigs /
IncrementalAlterConfigs / AlterConfigs on a broker resource of a standalone core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.dynamic_config.broker_configs import (
    FILE_NAME,
    FOLLOWER_THROTTLED_RATE,
    DynamicBrokerConfigs,
    new_overrides,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from tests.broker.handlers.wire import CoreHarness, call1, core_at

SET, DELETE, APPEND = 0, 1, 2
RATE = FOLLOWER_THROTTLED_RATE


def test_only_the_dynamic_names_change_with_kafka_errors() -> None:
    assert new_overrides({}, [(RATE, SET, " 1048576")], True) == {RATE: "1048576"}
    assert new_overrides({RATE: "5"}, [("follower_replication_throttled_rate", DELETE, None)],
                         True) == {}
    assert new_overrides({RATE: "5"}, [], False) == {}  # AlterConfigs replaces the set
    cases: list[tuple[list[tuple[str, int, str | None]], ErrorCode, str]] = [
        ([("log.retention.ms", SET, "1")], ErrorCode.INVALID_REQUEST,
         "Cannot update these configs dynamically: Set(log.retention.ms)"),
        ([("leader.replication.throttled.rate", SET, "1")], ErrorCode.INVALID_REQUEST,
         "no leader-side replication throttle"),
        ([(RATE, SET, "fast")], ErrorCode.INVALID_REQUEST, "Not a number of type LONG"),
        ([(RATE, SET, "-1")], ErrorCode.INVALID_REQUEST, "Value must be at least 0"),
        ([(RATE, SET, None)], ErrorCode.INVALID_REQUEST, "null value"),
        ([(RATE, 7, "1")], ErrorCode.INVALID_REQUEST, "unknown operation"),
        ([(RATE, SET, "1"), ("follower_replication_throttled_rate", SET, "2")],
         ErrorCode.INVALID_REQUEST, "named twice"),
        ([(RATE, APPEND, "1")], ErrorCode.INVALID_CONFIG, "append is not allowed"),
    ]
    for configs, code, words in cases:
        with pytest.raises(MiniKafkaError) as info:
            new_overrides({}, configs, True)
        assert info.value.code == code and words in str(info.value), configs


def test_overrides_are_kept_across_a_restart_and_listeners_hear_each_change(
        tmp_path: Path) -> None:
    config = BrokerConfig(node_id=0, data_dir=str(tmp_path), follower_replication_throttled_rate=7)
    dynamic = DynamicBrokerConfigs(config, tmp_path)
    heard: list[int] = []
    dynamic.listen(lambda: heard.append(dynamic.follower_replication_throttled_rate))
    assert dynamic.follower_replication_throttled_rate == 7 and dynamic.overrides == {}
    dynamic.alter({RATE: "1000"})
    dynamic.alter({RATE: "1000"})  # no change: no write, no call
    assert heard == [1000]
    again = DynamicBrokerConfigs(config, tmp_path)
    assert again.overrides == {RATE: "1000"} and again.follower_replication_throttled_rate == 1000
    dynamic.alter({})
    assert heard == [1000, 7] and DynamicBrokerConfigs(config, tmp_path).overrides == {}


@pytest.mark.parametrize("text", ["{not json", '{"version": 1, "configs": {'
                                  '"follower.replication.throttled.rate": "-5", "x.y": "1"}}',
                                  '["a list"]'])
def test_a_damaged_file_leaves_the_static_values(tmp_path: Path, text: str) -> None:
    (tmp_path / FILE_NAME).write_text(text)
    config = BrokerConfig(node_id=0, data_dir=str(tmp_path), follower_replication_throttled_rate=3)
    assert DynamicBrokerConfigs(config, tmp_path).follower_replication_throttled_rate == 3


def _entry(h: CoreHarness, name: str = RATE, resource: str = "0") -> dict[str, Any]:
    described = call1(h.core, ApiKey.DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": 4, "resource_name": resource, "configuration_keys": [name]}],
        "include_synonyms": True, "include_documentation": False})
    (entry,) = described["results"][0]["configs"]
    return entry


def _alter(h: CoreHarness, configs: list[dict[str, Any]], resource: str = "0",
           api: ApiKey = ApiKey.INCREMENTAL_ALTER_CONFIGS, validate_only: bool = False,
           ) -> tuple[int, str | None]:
    answer = call1(h.core, api, {"resources": [
        {"resource_type": 4, "resource_name": resource, "configs": configs}],
        "validate_only": validate_only})
    (r,) = answer["responses"]
    return r["error_code"], r["error_message"]


def test_a_broker_resource_alters_and_describes_its_dynamic_config(tmp_path: Path) -> None:
    with core_at(tmp_path / "b0", follower_replication_throttled_rate=2048) as h:
        entry = _entry(h)
        assert (entry["value"], entry["config_source"], entry["read_only"]) == ("2048", 4, False)
        assert _entry(h, "segment.bytes")["read_only"] is True
        assert _alter(h, [{"name": RATE, "config_operation": SET, "value": "4096"}],
                      validate_only=True) == (0, None)
        assert _entry(h)["config_source"] == 4
        assert _alter(h, [{"name": RATE, "config_operation": SET, "value": "4096"}]) == (0, None)
        entry = _entry(h)
        assert (entry["value"], entry["config_source"]) == ("4096", 2)  # DYNAMIC_BROKER_CONFIG
        assert [(s["value"], s["source"]) for s in entry["synonyms"]] == [("4096", 2),
                                                                          ("2048", 4)]
        assert h.core.dynamic_configs.follower_replication_throttled_rate == 4096
        code, message = _alter(h, [{"name": "log.retention.ms", "config_operation": SET,
                                    "value": "1"}])
        assert code == ErrorCode.INVALID_REQUEST and "dynamically" in (message or "")
        code, message = _alter(h, [{"name": RATE, "value": "1"}], resource="")
        assert code == ErrorCode.INVALID_REQUEST and "cluster-wide" in (message or "")
        code, _ = _alter(h, [{"name": RATE, "value": "1"}], resource="3")
        assert code == ErrorCode.INVALID_REQUEST
        # AlterConfigs replaces the set: without the rate, back to the static value
        assert _alter(h, [], api=ApiKey.ALTER_CONFIGS) == (0, None)
        assert _entry(h)["config_source"] == 4 and _entry(h)["value"] == "2048"
        assert _alter(h, [{"name": RATE, "value": "99"}], api=ApiKey.ALTER_CONFIGS) == (0, None)
    with core_at(tmp_path / "b0", follower_replication_throttled_rate=2048) as h:
        assert _entry(h)["value"] == "99"  # kept across a restart
        stored = json.loads((tmp_path / "b0" / FILE_NAME).read_text())
        assert stored["configs"] == {RATE: "99"}
