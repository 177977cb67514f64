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
* Kafka's (Java) names and librdkafka's names for the same setting are accepted:
  timeouts and fetch sizes, ``client.id``, ``security.protocol``, ``sasl.mechanism``,
  ``sasl.jaas.config`` (a ``ScramLoginModule``/``PlainLoginModule`` line: its username
  and password), ``sasl.username``/``sasl.password``, PEM trust and key stores
  (``ssl.truststore.location`` with ``ssl.truststore.type=PEM``, or
  ``ssl.ca.location``; ``ssl.keystore.location`` with ``ssl.keystore.type=PEM``, or
  ``ssl.certificate.location`` + ``ssl.key.location``), ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``""`` turns the host name check off).
* Any other ``kafka.*`` key is an error naming the supported ones (Kafka's consumer
  would only log "supplied but isn't a known config"; a setting silently dropped here
  would be a security or tuning setting not applied).  JKS/PKCS12 stores are refused:
  the client reads PEM files.

Costs: O(options).  Pure functions: thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from clients.protocol.errors import InvalidConfigError

__all__ = ["ADMIN_KEYWORDS", "FORBIDDEN", "consumer_settings"]

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

_INT: dict[str, str] = {  # Kafka name -> Consumer keyword, for integer settings
    "fetch.min.bytes": "fetch_min_bytes",
    "fetch.max.wait.ms": "fetch_max_wait_ms", "fetch.max.bytes": "fetch_max_bytes",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "max.poll.records": "max_poll_records", "request.timeout.ms": "request_timeout_ms",
    "retry.backoff.ms": "retry_backoff_ms", "metadata.max.age.ms": "metadata_max_age_ms",
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
}  # fmt: skip
_STR = {
    "client.id": "client_id", "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password",
}  # fmt: skip
_STORES = ("ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
           "ssl.keystore.type")
_OTHER = ("sasl.jaas.config", "ssl.endpoint.identification.algorithm", *_STORES)
SUPPORTED = sorted({*_INT, *_STR, *_OTHER})

# the keywords the admin client (topic listing for subscribePattern) shares
ADMIN_KEYWORDS = frozenset({
    "client_id", "request_timeout_ms", "security_protocol", "sasl_mechanism",
    "sasl_plain_username", "sasl_plain_password", "ssl_cafile", "ssl_certfile",
    "ssl_keyfile", "ssl_password", "ssl_check_hostname",
})  # fmt: skip

_JAAS = re.compile(
    r"^\s*org\.apache\.kafka\.common\.security\.(?:scram\.Scram|plain\.Plain)LoginModule"
    r"\s+required\s+(?P<args>.*?);?\s*$", re.S)
_JAAS_ARG = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def consumer_settings(kafka_options: Mapping[str, str]) -> tuple[tuple[str, object], ...]:
    """``{"kafka.security.protocol": "SASL_SSL", ...}`` (names lower-cased, the
    ``kafka.`` prefix kept) -> sorted Consumer keyword pairs; raises
    :class:`InvalidConfigError` with Spark's message for a refused key."""
    given = {name[len("kafka."):]: value for name, value in kafka_options.items()}
    for name in given:
        if name in FORBIDDEN:
            raise InvalidConfigError(FORBIDDEN[name])
        if name not in _INT and name not in _STR and name not in _OTHER:
            raise InvalidConfigError(
                f"Kafka option {name!r} (source option 'kafka.{name}') is not supported by "
                f"the minikafka source; supported kafka.* options: {SUPPORTED}"
            )
    out: dict[str, object] = {}
    for name, value in given.items():
        keyword = _INT.get(name)
        if keyword:
            try:
                out[keyword] = int(value.strip())
            except ValueError:
                raise InvalidConfigError(
                    f"option 'kafka.{name}' must be an integer, got {value!r}") from None
        elif name in _STR:
            out[_STR[name]] = value.strip()
    if "sasl.jaas.config" in given:
        out.update(_jaas(given["sasl.jaas.config"]))
    if "ssl.endpoint.identification.algorithm" in given:
        out["ssl_check_hostname"] = bool(given["ssl.endpoint.identification.algorithm"].strip())
    out.update(_stores(given))
    return tuple(sorted(out.items()))


def _jaas(config: str) -> dict[str, str]:
    """Username and password from a SCRAM/PLAIN JAAS login module line."""
    m = _JAAS.match(config)
    args = dict(_JAAS_ARG.findall(m.group("args"))) if m else {}
    if not m or "username" not in args or "password" not in args:
        raise InvalidConfigError(
            "option 'kafka.sasl.jaas.config' must be a ScramLoginModule (or PlainLoginModule) "
            'line with username="..." and password="..."'
        )
    unescape = re.compile(r"\\(.)")
    return {"sasl_plain_username": unescape.sub(r"\1", args["username"]),
            "sasl_plain_password": unescape.sub(r"\1", args["password"])}  # fmt: skip


def _stores(given: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, location, keywords in (
        ("ssl.truststore.type", "ssl.truststore.location", ("ssl_cafile",)),
        ("ssl.keystore.type", "ssl.keystore.location", ("ssl_certfile", "ssl_keyfile")),
    ):
        store_type = given.get(kind, "JKS" if location in given else "PEM").strip().upper()
        if store_type != "PEM":
            raise InvalidConfigError(
                f"option 'kafka.{kind}' {store_type!r} is not supported: the minikafka client "
                f"reads PEM files (set 'kafka.{kind}' to PEM, or use kafka.ssl.ca.location / "
                "kafka.ssl.certificate.location / kafka.ssl.key.location)"
            )
        if location in given:
            out.update(dict.fromkeys(keywords, given[location].strip()))
    return out
