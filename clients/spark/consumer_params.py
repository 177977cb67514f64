"""``kafka.*`` options of the ``minikafka`` Spark source: Kafka consumer settings passed
through to :class:`clients.consumer.consumer.Consumer`, as Spark's Kafka source passes
them to its KafkaConsumer.

Contract: :func:`consumer_settings` takes the source options whose lower-cased name
starts with ``kafka.`` (other than ``kafka.bootstrap.servers``, ``kafka.isolation.level``
and ``kafka.group.id``, which :mod:`clients.spark.options` reads itself) and returns
``(keyword, value)`` pairs for the Consumer, values converted and checked.

* Spark's refused keys are refused with Spark's message: ``auto.offset.reset``,
  ``key.deserializer``, ``value.deserializer``, ``enable.auto.commit``,
  ``interceptor.classes`` (the source manages offsets itself and hands out bytes).
* The settings passed on (:data:`PASSED`: the connection and login settings, and
  fetch and session tuning) are translated by the client's shared table,
  :data:`clients.config.kafka_names.CONSUMER` (Kafka's and librdkafka's names,
  ``sasl.jaas.config``, PEM stores, ...; its errors name the source option).
* Any other ``kafka.*`` key is an error naming the supported ones (Kafka's consumer
  would only log "supplied but isn't a known config"; a setting silently dropped here
  would be a security or tuning setting not applied).

Costs: O(options).  Pure functions: thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping

from clients.config.kafka_names import ADMIN, CONSUMER
from clients.protocol.errors import InvalidConfigError

__all__ = ["FORBIDDEN", "PASSED", "consumer_settings"]

# Spark's KafkaSourceProvider refuses these with these messages (IllegalArgumentException)
FORBIDDEN = {
    "auto.offset.reset": (
        "Kafka option 'auto.offset.reset' is not supported. Instead set the source option "
        "'startingOffsets' to 'earliest' or 'latest' to specify where to start. Structured "
        "Streaming manages which offsets are consumed internally, rather than relying on "
        "the kafkaConsumer to do it. This will ensure that no data is missed when new "
        "topics/partitions are dynamically subscribed. Note that 'startingOffsets' only "
        "applies when a new Streaming query is started, and that resuming will always pick "
        "up from where the query left off. See the docs for more details."),
    "key.deserializer": (
        "Kafka option 'key.deserializer' is not supported, as keys are deserialized as byte "
        "arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
        "deserialize the keys."),
    "value.deserializer": (
        "Kafka option 'value.deserializer' is not supported, as values are deserialized as "
        "byte arrays with ByteArrayDeserializer. Use DataFrame operations to explicitly "
        "deserialize the values."),
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported.",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported.",
}  # fmt: skip

# the consumer settings the source passes on (Kafka's names, clients.config.kafka_names):
# the connection and login, and fetch and session tuning; the source assigns partitions
# and manages offsets itself, so group and offset settings are not among them
PASSED = (
    *(n for n in ADMIN.names if n != "bootstrap.servers"),
    "fetch.min.bytes", "fetch.max.wait.ms", "fetch.max.bytes", "max.partition.fetch.bytes",
    "max.poll.records", "retry.backoff.ms", "metadata.max.age.ms", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms",
)  # fmt: skip
SUPPORTED = sorted(PASSED)


def consumer_settings(kafka_options: Mapping[str, str]) -> tuple[tuple[str, object], ...]:
    """``{"kafka.security.protocol": "SASL_SSL", ...}`` (names lower-cased, the
    ``kafka.`` prefix kept) -> sorted Consumer keyword pairs; raises
    :class:`InvalidConfigError` with Spark's message for a refused key."""
    given = {name[len("kafka."):]: value for name, value in kafka_options.items()}
    for name in given:
        if name in FORBIDDEN:
            raise InvalidConfigError(FORBIDDEN[name])
        if name not in PASSED:
            raise InvalidConfigError(
                f"Kafka option {name!r} (source option 'kafka.{name}') is not supported by "
                f"the minikafka source; supported kafka.* options: {SUPPORTED}"
            )
    out = CONSUMER.translate(given, label=lambda name: f"option 'kafka.{name}'")
    return tuple(sorted(out.items()))
