"""Options and columns of the ``minikafka`` Spark sink, as Spark's Kafka sink has them.

Options (names case-insensitive, as Spark passes them):

=============================  ==========================================================
option                         meaning
=============================  ==========================================================
``kafka.bootstrap.servers``    "host:port[,...]"; required (``bootstrap.servers`` too)
``topic``                      the topic of every row; overrides a ``topic`` column
                               (as in Spark)
``includeHeaders``             accepted (``true``/``false``) and ignored: the sink
                               writes a ``headers`` column whenever the DataFrame has
                               one, as Spark's Kafka sink does (it is a source option)
``kafka.<producer setting>``   passed to our :class:`~clients.producer.producer.Producer`
                               when it has the setting (:data:`PRODUCER_SETTINGS`);
                               any other ``kafka.*`` key is refused by name
``checkpointLocation``,        Spark's own (streaming) options: accepted, not ours
``path``, ``queryName``
=============================  ==========================================================

Refused as Spark refuses them: ``kafka.key.serializer`` / ``kafka.value.serializer``
(rows are bytes).  Refused here: ``kafka.transactional.id`` (this sink does not run
transactions: use :class:`clients.spark.transactional_sink.TransactionalSink`) and any
other unknown option (a typo fails instead of being ignored; Spark's sink ignores it).

Columns (Spark's Kafka sink): ``value`` (string or binary) required; ``key`` (string or
binary), ``topic`` (string), ``partition`` (int), ``headers``
(array<struct<key:string,value:binary>>) optional; other columns are ignored (a
DataFrame read from a topic can be written as is).  :func:`sink_columns` checks them
with Spark's messages.

Costs: O(size of the options).  Pure functions and frozen values: thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from clients.protocol.errors import InvalidConfigError

__all__ = ["PRODUCER_SETTINGS", "SinkColumns", "SinkOptions", "parse_sink_options",
           "sink_columns"]  # fmt: skip


def _acks(value: str) -> int | str:
    if value.strip().lower() == "all":
        return "all"
    return int(value)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"not true/false: {value!r}")
    return lowered == "true"


# Kafka producer setting -> (Producer keyword, converter)
PRODUCER_SETTINGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "acks": ("acks", _acks),
    "batch.size": ("batch_size", int),
    "batch.max.size": ("batch_max_size", int),
    "buffer.memory": ("buffer_memory", int),
    "client.id": ("client_id", str),
    "compression.type": ("compression_type", str),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "enable.idempotence": ("enable_idempotence", _bool),
    "linger.ms": ("linger_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "max.request.size": ("max_request_size", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
}
_SPARK_OPTIONS = ("checkpointlocation", "path", "queryname")
_SERIALIZERS = {"key.serializer": "keys", "value.serializer": "values"}


@dataclass(frozen=True)
class SinkOptions:
    """Checked sink options: the bootstrap servers, the ``topic`` option (None: the
    ``topic`` column) and the Producer keywords from ``kafka.*``."""

    bootstrap_servers: str
    topic: str | None
    producer_config: tuple[tuple[str, Any], ...] = ()


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check ``options`` as Spark hands them to the sink; :class:`InvalidConfigError`
    with a precise message on anything wrong."""
    bootstrap: str | None = None
    topic: str | None = None
    config: dict[str, Any] = {}
    for key, value in options.items():
        name = key.lower()
        if name in ("kafka.bootstrap.servers", "bootstrap.servers"):
            bootstrap = value
        elif name == "topic":
            topic = value
        elif name == "includeheaders":
            _converted("includeHeaders", value, _bool)
        elif name in _SPARK_OPTIONS:
            continue
        elif name.startswith("kafka."):
            setting = name[len("kafka."):]
            keyword, convert = _producer_setting(setting)
            config[keyword] = _converted(key, value, convert)
        else:
            raise InvalidConfigError(
                f"unknown minikafka sink option {key!r}; the sink takes "
                "kafka.bootstrap.servers, topic, includeHeaders and kafka.<producer setting>"
            )
    if not bootstrap or not bootstrap.strip():
        raise InvalidConfigError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
        )
    if topic is not None and not topic.strip():
        raise InvalidConfigError("option 'topic' is empty")
    return SinkOptions(bootstrap, topic, tuple(sorted(config.items())))


def _producer_setting(setting: str) -> tuple[str, Callable[[str], Any]]:
    if setting in _SERIALIZERS:
        raise InvalidConfigError(
            f"Kafka option '{setting}' is not supported as {_SERIALIZERS[setting]} are "
            "serialized with ByteArraySerializer."
        )
    if setting == "transactional.id":
        raise InvalidConfigError(
            "option 'kafka.transactional.id': the minikafka sink is at-least-once and runs no "
            "transactions; for exactly-once use clients.spark.transactional_sink."
            "TransactionalSink with foreachBatch"
        )
    found = PRODUCER_SETTINGS.get(setting)
    if found is None:
        raise InvalidConfigError(
            f"option 'kafka.{setting}': not a setting of the minikafka producer; supported: "
            + ", ".join(f"kafka.{s}" for s in sorted(PRODUCER_SETTINGS))
        )
    return found


def _converted(key: str, value: str, convert: Callable[[str], Any]) -> Any:
    try:
        return convert(value)
    except ValueError as e:
        raise InvalidConfigError(f"option {key!r}: bad value {value!r} ({e})") from e


@dataclass(frozen=True)
class SinkColumns:
    """Which of Spark's Kafka sink columns the DataFrame has (``value`` always)."""

    key: bool
    topic: bool
    partition: bool
    headers: bool


_HEADERS = "array<struct<key:string,value:binary>>"


def sink_columns(types: Mapping[str, str], topic_option: str | None) -> SinkColumns:
    """Check the DataFrame's columns (name -> Spark ``simpleString`` type) as Spark's
    Kafka sink does, with its messages; the topic option replaces a ``topic`` column."""
    if "value" not in types:
        raise InvalidConfigError("Required attribute 'value' not found")
    _check_type(types, "value", ("string", "binary"), "a string or binary")
    _check_type(types, "key", ("string", "binary"), "a string or binary")
    if topic_option is None:
        if "topic" not in types:
            raise InvalidConfigError(
                "topic option required when no 'topic' attribute is present. "
                "Use the topic option for setting a topic."
            )
        _check_type(types, "topic", ("string",), "a string")
    _check_type(types, "partition", ("int",), "a(n) int")
    _check_type(types, "headers", (_HEADERS,), f"a(n) {_HEADERS}")
    return SinkColumns(key="key" in types, topic=topic_option is None,
                       partition="partition" in types, headers="headers" in types)  # fmt: skip


def _check_type(types: Mapping[str, str], name: str, allowed: tuple[str, ...],
                wanted: str) -> None:  # fmt: skip
    given = types.get(name)
    if given is not None and given not in allowed:
        raise InvalidConfigError(
            f"{name} attribute unsupported type {given}. {name} must be {wanted}"
        )
