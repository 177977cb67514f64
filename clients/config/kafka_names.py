"""Kafka's client setting names -> the keyword arguments of our Admin, Producer and
Consumer.

Users of Kafka write their client settings under Kafka's (Java) names, or librdkafka's
where they differ (``sasl.username``, ``ssl.ca.location``), in a properties file
(``--command-config``), on the command line (``-X key=value``) or as Spark source
options (``kafka.*``).  :meth:`ClientNames.translate` turns such ``name -> text`` pairs
into the keywords of one client (:data:`ADMIN`, :data:`PRODUCER`, :data:`CONSUMER`),
each value converted and checked.

Accepted, for every client:

* ``bootstrap.servers``, ``client.id``, ``request.timeout.ms``;
* ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; any case);
* ``sasl.mechanism`` (librdkafka: ``sasl.mechanisms``): SCRAM-SHA-256, SCRAM-SHA-512,
  PLAIN (our clients' mechanisms; GSSAPI and OAUTHBEARER are refused by name);
* ``sasl.username`` / ``sasl.password`` (librdkafka), or ``sasl.jaas.config``: Java's
  ``org.apache.kafka.common.security.scram.ScramLoginModule`` (or ``...plain.
  PlainLoginModule``) ``required username="..." password="...";`` parsed strictly:
  one login module, a control flag, double-quoted ``username`` and ``password`` (``\\"``
  and ``\\\\`` escaped), nothing else but white space, and the closing ``;``;
* PEM files: ``ssl.ca.location`` (or ``ssl.truststore.location`` with
  ``ssl.truststore.type=PEM``), the client certificate ``ssl.certificate.location`` +
  ``ssl.key.location`` (or ``ssl.keystore.location`` with ``ssl.keystore.type=PEM``, a
  file holding both), ``ssl.key.password``; JKS and PKCS12 stores are refused (the client
  reads PEM); ``ssl.endpoint.identification.algorithm`` (``https``, Kafka's default:
  check the broker's host name; empty: do not).

and the producer's and the consumer's own settings under Kafka's names (``acks``,
``linger.ms``, ``compression.type``, ``enable.idempotence``, ...; ``group.id``,
``fetch.max.wait.ms``, ``auto.offset.reset``, ``partition.assignment.strategy`` with
Kafka's assignor class names or librdkafka's, ...: the tables below).  With
``our_names`` the keywords themselves are accepted too, with dots or underscores
(``linger_ms``, ``ssl.cafile``): the spellings the CLI took before Kafka's.

Errors (:class:`~clients.protocol.errors.InvalidConfigError`) name the setting as given
(``label``): an unknown or unsupported name (``unknown Consumer setting 'x'``: Kafka's
clients only log "isn't a known config", but a security or tuning setting silently
dropped here would be one not applied), a value that does not convert, two names giving
one setting different values (``ssl.ca.location`` and ``ssl.truststore.location``).
The values of :data:`SECRET_NAMES` (passwords, the JAAS line) never appear in an error
or a repr.  Which combinations work together (SASL settings with a SASL protocol, ...)
the clients check when built (:func:`clients.network.sasl.sasl_login_of`,
:func:`clients.network.tls.ssl_context_of`).

Costs: O(settings).  Immutable tables and pure functions: thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clients.network.tls import PROTOCOLS
from clients.protocol.errors import InvalidConfigError
from clients.protocol.scram import MECHANISMS, PLAIN

__all__ = ["ADMIN", "ADMIN_KEYWORDS", "CONSUMER", "PRODUCER", "SECRET_NAMES", "ClientNames",
           "Setting", "parse_jaas_config"]

SASL_MECHANISMS = (*sorted(MECHANISMS), PLAIN)
SECRET_NAMES = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password",
                          "sasl_plain_password", "ssl_password", "ssl.password",
                          "sasl.plain.password"})
JAAS_MODULES = ("org.apache.kafka.common.security.scram.ScramLoginModule",
                "org.apache.kafka.common.security.plain.PlainLoginModule")
JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")
# Kafka's and librdkafka's assignor names -> ours (clients.consumer.assignors)
ASSIGNOR_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    "range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Setting:
    """One Kafka name: the keyword it sets and how its text converts (a converter
    raises ValueError naming what it expected, e.g. ``"an integer"``)."""

    keyword: str
    convert: Callable[[str], object]


def _text(value: str) -> str:
    return value.strip()


def _secret(value: str) -> str:
    return value  # as written: a password may begin or end with white space


def _int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError("an integer") from None


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError("true or false")
    return text == "true"


def _choice(*choices: str, upper: bool = False) -> Callable[[str], str]:
    def convert(value: str) -> str:
        text = value.strip().upper() if upper else value.strip()
        if text not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return text

    return convert


def _acks(value: str) -> int | str:
    text = value.strip().lower()
    if text == "all":
        return "all"
    if text in ("-1", "0", "1"):
        return int(text)
    raise ValueError("0, 1, -1 or all")


def _assignors(value: str) -> tuple[str, ...]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in ASSIGNOR_NAMES]
    if unknown or not names:
        raise ValueError(f"a comma list of {', '.join(sorted(ASSIGNOR_NAMES))}")
    return tuple(ASSIGNOR_NAMES[n] for n in names)


_CONNECTION = {
    "bootstrap.servers": Setting("bootstrap_servers", _text),
    "client.id": Setting("client_id", _text),
    "request.timeout.ms": Setting("request_timeout_ms", _int),
    "security.protocol": Setting("security_protocol", _choice(*PROTOCOLS, upper=True)),
    "sasl.mechanism": Setting("sasl_mechanism", _choice(*SASL_MECHANISMS, upper=True)),
    "sasl.mechanisms": Setting("sasl_mechanism", _choice(*SASL_MECHANISMS, upper=True)),
    "sasl.username": Setting("sasl_plain_username", _text),
    "sasl.password": Setting("sasl_plain_password", _secret),
    "ssl.ca.location": Setting("ssl_cafile", _text),
    "ssl.certificate.location": Setting("ssl_certfile", _text),
    "ssl.key.location": Setting("ssl_keyfile", _text),
    "ssl.key.password": Setting("ssl_password", _secret),
}  # fmt: skip
# names that set several keywords or depend on each other: _special()
_SPECIAL = ("sasl.jaas.config", "ssl.endpoint.identification.algorithm",
            "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location",
            "ssl.keystore.type")
_SPECIAL_KEYWORDS = ("sasl_plain_username", "sasl_plain_password", "ssl_cafile",
                     "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")
_SHARED = {  # the producer's and the consumer's, not the admin client's
    "retry.backoff.ms": Setting("retry_backoff_ms", _int),
    "metadata.max.age.ms": Setting("metadata_max_age_ms", _int),
}
_PRODUCER = {
    "acks": Setting("acks", _acks),
    "enable.idempotence": Setting("enable_idempotence", _bool),
    "transactional.id": Setting("transactional_id", _text),
    "transaction.timeout.ms": Setting("transaction_timeout_ms", _int),
    "linger.ms": Setting("linger_ms", _int),
    "batch.size": Setting("batch_size", _int),
    "buffer.memory": Setting("buffer_memory", _int),
    "max.block.ms": Setting("max_block_ms", _int),
    "retries": Setting("retries", _int),
    "delivery.timeout.ms": Setting("delivery_timeout_ms", _int),
    "max.in.flight.requests.per.connection": Setting("max_in_flight_requests_per_connection",
                                                     _int),
    "max.request.size": Setting("max_request_size", _int),
    "compression.type": Setting("compression_type",
                                _choice("none", "gzip", "snappy", "lz4", "zstd")),
}  # fmt: skip
_CONSUMER = {
    "fetch.min.bytes": Setting("fetch_min_bytes", _int),
    "fetch.max.wait.ms": Setting("fetch_max_wait_ms", _int),
    "fetch.max.bytes": Setting("fetch_max_bytes", _int),
    "max.partition.fetch.bytes": Setting("max_partition_fetch_bytes", _int),
    "max.poll.records": Setting("max_poll_records", _int),
    "group.id": Setting("group_id", _text),
    "group.instance.id": Setting("group_instance_id", _text),
    "session.timeout.ms": Setting("session_timeout_ms", _int),
    "heartbeat.interval.ms": Setting("heartbeat_interval_ms", _int),
    "max.poll.interval.ms": Setting("max_poll_interval_ms", _int),
    "partition.assignment.strategy": Setting("partition_assignment_strategy", _assignors),
    "enable.auto.commit": Setting("enable_auto_commit", _bool),
    "auto.commit.interval.ms": Setting("auto_commit_interval_ms", _int),
    "auto.offset.reset": Setting("auto_offset_reset", _choice("earliest", "latest", "none")),
    "isolation.level": Setting("isolation_level",
                               _choice("read_uncommitted", "read_committed")),
}  # fmt: skip

_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);\s*", re.S)
_JAAS_OPTION = re.compile(r'\s*(?P<key>[\w.]+)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"', re.S)


def parse_jaas_config(text: str, label: str = "setting 'sasl.jaas.config'") -> dict[str, str]:
    """``ScramLoginModule required username="u" password="p";`` -> the login keywords
    (``sasl_plain_username``, ``sasl_plain_password``); InvalidConfigError naming what is
    wrong, never the password."""
    shape = (f'{JAAS_MODULES[0]} required username="..." password="...";')
    m = _JAAS.fullmatch(text)
    if m is None:
        raise InvalidConfigError(f"{label} must be one login module line ending in ';': "
                                 f"{shape}")
    if m["module"] not in JAAS_MODULES:
        raise InvalidConfigError(f"{label}: login module {m['module']!r} is not supported "
                                 f"(supported: {', '.join(JAAS_MODULES)})")
    if m["flag"] not in JAAS_FLAGS:
        raise InvalidConfigError(f"{label}: {m['flag']!r} is not a control flag "
                                 f"({', '.join(JAAS_FLAGS)})")
    options: dict[str, str] = {}
    rest = m["options"]
    while rest.strip():
        option = _JAAS_OPTION.match(rest)
        if option is None:
            raise InvalidConfigError(f"{label}: expected key=\"value\" options after "
                                     f"{m['flag']!r} (values in double quotes): {shape}")
        key = option["key"]
        if key not in ("username", "password"):
            raise InvalidConfigError(f"{label}: option {key!r} is not supported "
                                     "(only username and password)")
        if key in options:
            raise InvalidConfigError(f"{label}: option {key!r} is given twice")
        options[key] = re.sub(r"\\(.)", r"\1", option["value"], flags=re.S)
        rest = rest[option.end():]
    missing = [k for k in ("username", "password") if k not in options]
    if missing:
        raise InvalidConfigError(f"{label} has no {' and no '.join(missing)}: {shape}")
    return {"sasl_plain_username": options["username"],
            "sasl_plain_password": options["password"]}  # fmt: skip


def _default_label(name: str) -> str:
    return f"setting {name!r}"


@dataclass(frozen=True)
class ClientNames:
    """Kafka's names of one client's settings (``client``: its class name, for errors)."""

    client: str
    settings: Mapping[str, Setting]

    @property
    def keywords(self) -> frozenset[str]:
        """Every keyword a translation can produce."""
        return frozenset({s.keyword for s in self.settings.values()} | set(_SPECIAL_KEYWORDS))

    @property
    def names(self) -> tuple[str, ...]:
        """The Kafka names accepted, sorted."""
        return tuple(sorted({*self.settings, *_SPECIAL}))

    def translate(self, properties: Mapping[str, str], *, our_names: bool = False,
                  label: Callable[[str], str] = _default_label) -> dict[str, object]:
        """``{"security.protocol": "SASL_SSL", ...}`` -> ``{"security_protocol":
        "SASL_SSL", ...}`` (module docstring); InvalidConfigError naming the setting."""
        by_keyword = {s.keyword: s for s in self.settings.values()}
        by_keyword["ssl_check_hostname"] = Setting("ssl_check_hostname", _bool)
        out: dict[str, object] = {}
        origin: dict[str, str] = {}

        def put(name: str, keyword: str, value: object) -> None:
            if keyword in out and out[keyword] != value:
                raise InvalidConfigError(f"{label(origin[keyword])} and {label(name)} give "
                                         "different values for one setting: keep one")
            out[keyword] = value
            origin[keyword] = name

        special = {n: v for n, v in properties.items() if n in _SPECIAL}
        for name, text in properties.items():
            if name in _SPECIAL:
                continue
            setting = self.settings.get(name)
            if setting is None and our_names:
                setting = by_keyword.get(name.replace(".", "_").replace("-", "_"))
            if setting is None:
                raise InvalidConfigError(f"unknown {self.client} {label(name)}")
            try:
                value = setting.convert(text)
            except ValueError as exc:
                shown = "" if _is_secret(name) else f", got {text!r}"
                raise InvalidConfigError(f"{label(name)} must be {exc}{shown}") from None
            put(name, setting.keyword, value)
        for name, keyword, value in _special(special, label):
            put(name, keyword, value)
        return out


def _is_secret(name: str) -> bool:
    return name in SECRET_NAMES or "password" in name


def _special(given: Mapping[str, str], label: Callable[[str], str],
             ) -> list[tuple[str, str, object]]:
    """(name, keyword, value) of the names in ``_SPECIAL``."""
    out: list[tuple[str, str, object]] = []
    if "sasl.jaas.config" in given:
        login = parse_jaas_config(given["sasl.jaas.config"], label("sasl.jaas.config"))
        out += [("sasl.jaas.config", k, v) for k, v in login.items()]
    algorithm = given.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        text = algorithm.strip().lower()
        if text not in ("", "https", "none"):
            raise InvalidConfigError(f"{label('ssl.endpoint.identification.algorithm')} must "
                                     f"be https or empty, got {algorithm!r}")
        out.append(("ssl.endpoint.identification.algorithm", "ssl_check_hostname",
                    text == "https"))
    for kind, location, keywords in (
        ("ssl.truststore.type", "ssl.truststore.location", ("ssl_cafile",)),
        ("ssl.keystore.type", "ssl.keystore.location", ("ssl_certfile", "ssl_keyfile")),
    ):
        default = "JKS" if location in given else "PEM"
        store_type = given.get(kind, default).strip().upper()
        if store_type != "PEM":
            raise InvalidConfigError(
                f"{label(kind)}: {store_type!r} stores are not supported: the minikafka "
                f"client reads PEM files (set {kind}=PEM, or use ssl.ca.location / "
                "ssl.certificate.location / ssl.key.location)")
        if location in given:
            out += [(location, k, given[location].strip()) for k in keywords]
    return out


def _names(client: str, *tables: Mapping[str, Setting]) -> ClientNames:
    merged: dict[str, Setting] = {}
    for table in tables:
        merged.update(table)
    return ClientNames(client, merged)


ADMIN = _names("Admin", _CONNECTION)
PRODUCER = _names("Producer", _CONNECTION, _SHARED, _PRODUCER)
CONSUMER = _names("Consumer", _CONNECTION, _SHARED, _CONSUMER)
# what an admin client built from a producer's or consumer's settings takes of them (the
# bootstrap servers are passed apart)
ADMIN_KEYWORDS = ADMIN.keywords - {"bootstrap_servers"}
