"""Topic config overrides checked the way Kafka checks them, with Kafka's names and words in
every error: :func:`check_topic_configs`, shared by the controller (CreateTopics,
AlterConfigs, IncrementalAlterConfigs) and a standalone broker.

Names: a config may be given under Kafka's name (``retention.ms``,
``unclean.leader.election.enable``) or ours (``retention_ms``); it is stored under ours
(:func:`topic_config_key`) and always *reported* under Kafka's (:func:`kafka_config_name`),
whatever the user typed, so an error never shows our internal spelling.  The configs are
every :class:`storage.config.LogConfig` setting, ``min.insync.replicas`` and
``unclean.leader.election.enable``.

Errors are :class:`~clients.protocol.errors.InvalidConfigError` (INVALID_CONFIG) with
Kafka's messages: ``Unknown topic config name: nosuch.config`` (the name as typed),
``Invalid value abc for configuration retention.ms: expected an integer``.  A config
named twice, or given a null value, is an error too (INVALID_CONFIG here; the admin
handlers refuse those earlier with INVALID_REQUEST where Kafka does).

List-valued configs (:data:`LIST_CONFIGS`: ``cleanup.policy``) take Kafka's wire syntax,
``a,b`` (spaces around items ignored, an item named twice kept once); the CLI's ``[a,b]``
brackets are the tools' syntax and are removed by the CLI, not here.
``cleanup.policy`` is ``delete``, ``compact`` or both (``compact,delete`` and
``delete,compact`` mean the same, stored ``compact,delete``: compaction plus time/size
retention, as in Kafka; :func:`storage.config.normalize_cleanup_policy`).

Pure functions; costs: O(configs), one :class:`LogConfig` built per log config checked
(microseconds).  Thread-safe (no state).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from clients.protocol.errors import InvalidConfigError
from storage.config import CLEANUP_POLICIES, LogConfig, normalize_cleanup_policy

# our keys of the topic configs that are not log settings
TOPIC_ONLY_CONFIGS = ("min_insync_replicas", "unclean_leader_election")
# configs whose value is a comma-separated list (IncrementalAlterConfigs APPEND/SUBTRACT)
LIST_CONFIGS = ("cleanup_policy",)
# Kafka's names whose snake_case form is not ours
_ALIASES = {"unclean_leader_election_enable": "unclean_leader_election"}
_KAFKA_NAMES = {"unclean_leader_election": "unclean.leader.election.enable"}
LOG_CONFIG_KEYS = frozenset(f.name for f in dataclasses.fields(LogConfig))
TOPIC_CONFIG_KEYS = LOG_CONFIG_KEYS | frozenset(TOPIC_ONLY_CONFIGS)

TopicConfigPairs = Mapping[str, str | None] | Iterable[tuple[str, str | None]]


def topic_config_key(raw_key: str) -> str:
    """Our key of a topic config named ours (``retention_ms``) or Kafka's way
    (``retention.ms``, ``unclean.leader.election.enable``); not checked to exist."""
    key = str(raw_key).strip().replace(".", "_").replace("-", "_")
    return _ALIASES.get(key, key)


def kafka_config_name(key: str) -> str:
    """Kafka's name of a topic config given by our key (``retention_ms`` ->
    ``retention.ms``); for any other string its dotted form."""
    return _KAFKA_NAMES.get(key, key.replace("_", "."))


def is_topic_config(raw_key: str) -> bool:
    """Whether ``raw_key`` (Kafka's name or ours) names a topic config."""
    return topic_config_key(raw_key) in TOPIC_CONFIG_KEYS


def unknown_config(raw_key: str) -> InvalidConfigError:
    """Kafka's error for a name that is no topic config (the name as the user typed it)."""
    return InvalidConfigError(f"Unknown topic config name: {str(raw_key).strip()}")


def invalid_value(key: str, value: object, reason: str) -> InvalidConfigError:
    """Kafka's error for a bad value of the config ``key`` (ours)."""
    return InvalidConfigError(
        f"Invalid value {value} for configuration {kafka_config_name(key)}: {reason}")


def list_items(value: str) -> list[str]:
    """The items of a list config's value (``a, b,a`` -> ``[a, b]``)."""
    out: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if item and item not in out:
            out.append(item)
    return out


def check_topic_configs(configs: TopicConfigPairs) -> dict[str, str]:
    """Check topic config overrides (a map, or CreateTopics' ``(name, value)`` pairs);
    return them under our keys with values normalized (stripped; lists as ``a,b``;
    ``min.insync.replicas`` as a decimal; booleans lower case).  Any error:
    :class:`InvalidConfigError` in Kafka's words (module docstring)."""
    out: dict[str, str] = {}
    pairs = configs.items() if isinstance(configs, Mapping) else configs
    for raw_key, raw_value in pairs:
        key = topic_config_key(raw_key)
        if key not in TOPIC_CONFIG_KEYS:
            raise unknown_config(raw_key)
        if key in out:
            raise InvalidConfigError(f"Config {kafka_config_name(key)} is given twice")
        if not isinstance(raw_value, str):
            raise invalid_value(key, raw_value, "a null value is not supported")
        out[key] = _check_value(key, raw_value.strip())
    return out


def _check_value(key: str, value: str) -> str:
    if key == "min_insync_replicas":
        try:
            number = int(value, 10)
        except ValueError:
            raise invalid_value(key, value, "expected an integer") from None
        if number < 1:
            raise invalid_value(key, value, "Value must be at least 1")
        return str(number)
    if key == "unclean_leader_election":
        if value.lower() not in ("true", "false"):
            raise invalid_value(key, value, "Expected value to be either true or false")
        return value.lower()
    if key == "cleanup_policy":
        return _check_cleanup_policy(value)
    try:
        LogConfig.from_dict({key: value})
    except InvalidConfigError as exc:
        raise invalid_value(key, value, _reason(key, exc.message)) from None
    return value


def _check_cleanup_policy(value: str) -> str:
    items = list_items(value)
    if not items:
        raise invalid_value("cleanup_policy", value,
                            f"expected a list of {' or '.join(CLEANUP_POLICIES)}")
    wrong = [i for i in items if i not in CLEANUP_POLICIES]
    if wrong:
        raise invalid_value("cleanup_policy", value,
                            f"String must be one of: {', '.join(CLEANUP_POLICIES)}")
    return normalize_cleanup_policy(value)


def _reason(key: str, message: str) -> str:
    """LogConfig's message without its leading name (ours or as typed), which the Kafka
    message says already."""
    for prefix in (f"{key}: ", f"{key} ", f"{kafka_config_name(key)}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message
