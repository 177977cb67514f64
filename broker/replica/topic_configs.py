"""Topic configs: validation, each topic's :class:`LogConfig`, applying changes to logs.

A topic's configs come from the metadata image (controller mode) or the standalone
:class:`TopicRegistry`; :class:`TopicConfigs` reads whichever the broker has, through the
``image`` callable it is given (the metadata follower replaces the image as records
arrive).  Contract:

- :meth:`TopicConfigs.validate` normalizes overrides (our snake_case names or Kafka's
  dotted ones) and refuses anything else with :class:`TopicError` INVALID_CONFIG.
- :meth:`TopicConfigs.apply` is the one way settings reach hosted logs after they were
  opened; :meth:`TopicConfigs.min_insync_replicas` reads the configs it last applied, so
  a topic's settings change at one moment.

Costs: ``log_config_for`` builds a LogConfig from a dict (microseconds); ``apply`` is one
pass over the hosted partitions, one LogConfig per topic.  Not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from broker.config import BrokerConfig
from broker.metadata.image import MetadataImage
from broker.metadata.topic_config_checks import check_topic_configs, topic_config_key
from broker.topic_registry import TopicRegistry
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from storage.config import LogConfig

log = logging.getLogger(__name__)

# topic configs that are not log settings (the controller validates them)
NON_LOG_CONFIGS = frozenset({"min_insync_replicas", "unclean_leader_election",
                             "replication_factor"})


class TopicError(MiniKafkaError):
    """An error about a topic as a whole, with the code given per instance."""


class TopicConfigs:
    def __init__(self, config: BrokerConfig, registry: TopicRegistry,
                 image: Callable[[], MetadataImage | None]) -> None:
        self.config = config
        self.registry = registry
        self._image = image
        # the configs of the hosted topics as apply last gave them to their logs;
        # min_insync_replicas reads them too, so that a topic's settings change at one
        # moment (not while an image is rebuilt after OFFSET_OUT_OF_RANGE: empty)
        self.applied: dict[str, dict[str, str]] = {}

    def _log_defaults(self) -> dict[str, str | int | float | None]:
        return {k: v for k, v in self.config.log_defaults().items() if v is not None}

    def default_log_config(self) -> LogConfig:
        return LogConfig.from_dict(self._log_defaults())

    def topic_configs(self, topic: str) -> dict[str, str]:
        """The topic's overrides as the image (or the registry) has them now."""
        image = self._image()
        if image is not None:
            info = image.topics.get(topic)
            return dict(info.configs) if info else {}
        registered = self.registry.get(topic)
        return dict(registered.configs) if registered else {}

    def log_config_for(self, topic: str) -> LogConfig:
        overrides = self._log_defaults()
        overrides.update((k.replace(".", "_"), v) for k, v in self.topic_configs(topic).items()
                         if k.replace(".", "_") not in NON_LOG_CONFIGS)
        return LogConfig.from_dict(overrides)

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min_insync_replicas`` as applied to its hosted logs (see
        :meth:`apply`); for a topic not hosted here, as the image (or the registry) has
        it now."""
        applied = self.applied.get(topic)
        configs = {k.replace(".", "_"): v for k, v in
                   (applied if applied is not None else self.topic_configs(topic)).items()}
        raw = configs.get("min_insync_replicas")
        return int(raw) if raw is not None else self.config.min_insync_replicas

    def validate(self, configs: Mapping[str, str]) -> dict[str, str]:
        """Check a topic's config overrides; return them normalized (snake_case keys).

        :func:`broker.metadata.topic_config_checks.check_topic_configs` does it (Kafka's
        names or ours; errors in Kafka's words): anything else, or a bad value, is
        :class:`TopicError` INVALID_CONFIG.  ``replication_factor`` (ours, in Metadata
        answers) is dropped: not settable.
        """
        overrides = {k: v for k, v in configs.items()
                     if topic_config_key(k) != "replication_factor"}  # ours, not settable
        try:
            return check_topic_configs(overrides)
        except InvalidConfigError as exc:
            raise TopicError(exc.message, ErrorCode.INVALID_CONFIG) from None

    def apply(self, partitions: Mapping[TopicPartition, Partition]) -> None:
        """Give every hosted log, leader or follower, the config its topic has now: the
        one way a topic's settings reach its logs after they were opened (a config
        change, standalone or through the metadata image; every reconcile, so also the
        first after a restart, when the logs were opened with the config stored beside
        them, storage/log/config_file.py, which may be older).
        :meth:`Log.update_config` reaches the segments too.  Logs created later take
        the same :meth:`log_config_for` (the LogManager's ``config_for``)."""
        wanted: dict[str, LogConfig] = {}
        applied: dict[str, dict[str, str]] = {}
        for (topic, _), partition in partitions.items():
            config = wanted.get(topic)
            if config is None:
                try:
                    config = wanted[topic] = self.log_config_for(topic)
                except InvalidConfigError as exc:
                    log.warning("topic %s: config not applied: %s", topic, exc)
                    continue
                applied[topic] = self.topic_configs(topic)
            if partition.log.config != config:
                partition.log.update_config(config)
        self.applied = applied

    def forget(self, topic: str) -> None:
        """The topic was deleted here."""
        self.applied.pop(topic, None)
