"""Topic configs checked with Kafka's names and messages
(:mod:`broker.metadata.topic_config_checks`, pure): an error never shows our internal
spelling (``nosuch_config``, ``cleanup_policy``), whichever way the user named the key.
Over the wire and the CLI: tests/broker/handlers/test_kafka_shaped_errors.py and
tests/clients/cli/test_cli_errors.py."""

from __future__ import annotations

import pytest

from broker.metadata.topic_config_checks import (
    TOPIC_CONFIG_KEYS,
    check_topic_configs,
    kafka_config_name,
)
from clients.protocol.errors import ErrorCode, InvalidConfigError


def refused(configs: dict[str, str | None]) -> str:
    with pytest.raises(InvalidConfigError) as info:
        check_topic_configs(configs)
    assert info.value.code == ErrorCode.INVALID_CONFIG
    return info.value.message


def test_unknown_names_are_kafkas_message_with_the_name_as_typed() -> None:
    assert refused({"nosuch.config": "2"}) == "Unknown topic config name: nosuch.config"
    assert refused({"nosuch_config": "2"}) == "Unknown topic config name: nosuch_config"


@pytest.mark.parametrize(("configs", "message"), [
    ({"retention.ms": "abc"},
     "Invalid value abc for configuration retention.ms: expected an integer, got 'abc'"),
    ({"retention_ms": "-7"}, "Invalid value -7 for configuration retention.ms: "
                             "must be >= -1, got -7"),
    ({"segment.bytes": "12"}, "Invalid value 12 for configuration segment.bytes: "
                              "must be [1024, 2147483647], got 12"),
    ({"min.cleanable.dirty.ratio": "2"}, "Invalid value 2 for configuration "
                                         "min.cleanable.dirty.ratio: expected a number in "
                                         "[0, 1], got '2'"),
    ({"min_insync_replicas": "0"},
     "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
    ({"unclean_leader_election": "maybe"},
     "Invalid value maybe for configuration unclean.leader.election.enable: Expected value "
     "to be either true or false"),
    ({"message.timestamp.type": "Never"}, "Invalid value Never for configuration "
                                          "message.timestamp.type: must be one of "
                                          "('CreateTime', 'LogAppendTime'), got 'Never'"),
    ({"cleanup.policy": "nope"}, "Invalid value nope for configuration cleanup.policy: "
                                 "String must be one of: delete, compact"),
    ({"cleanup_policy": ""}, "Invalid value  for configuration cleanup.policy: expected a "
                             "list of delete or compact"),
    ({"retention.ms": None},
     "Invalid value None for configuration retention.ms: a null value is not supported"),
    ({"retention.ms": "1", "retention_ms": "2"}, "Config retention.ms is given twice"),
])
def test_bad_values_name_kafkas_key(configs: dict[str, str | None], message: str) -> None:
    assert refused(configs) == message


def test_compact_and_delete_together_is_accepted_in_either_order_normalized() -> None:
    for value in ("compact,delete", "delete, compact", "compact,delete,compact"):
        assert check_topic_configs({"cleanup.policy": value}) == {
            "cleanup_policy": "compact,delete"}, value
    message = refused({"cleanup.policy": "compact,nope"})
    assert message == ("Invalid value compact,nope for configuration cleanup.policy: "
                       "String must be one of: delete, compact"), message


def test_values_are_normalized_under_our_keys() -> None:
    assert check_topic_configs([("cleanup.policy", " compact ,compact"),
                                ("unclean.leader.election.enable", "TRUE"),
                                ("min.insync.replicas", "02"), ("retention_ms", " 5 ")]) == {
        "cleanup_policy": "compact", "unclean_leader_election": "true",
        "min_insync_replicas": "2", "retention_ms": "5"}


def test_every_config_has_a_kafka_name_without_underscores() -> None:
    names = {kafka_config_name(k) for k in TOPIC_CONFIG_KEYS}
    assert len(names) == len(TOPIC_CONFIG_KEYS) and not any("_" in n for n in names)
    assert kafka_config_name("unclean_leader_election") == "unclean.leader.election.enable"
