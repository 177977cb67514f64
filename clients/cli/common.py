"""What the ``minikafka`` command modules share: the user-facing error, the default
address and ``key=value`` client properties.

:class:`CliError` is raised by any command (``main``, ``groups``, ``workload``, ...) for
a failure the user caused or can fix; :func:`clients.cli.main.main` prints it as one
line ``error: ...`` and exits with status 1.

``DEFAULT_BOOTSTRAP`` is the broker address client commands use when neither
``--bootstrap-server``, ``MINIKAFKA_BOOTSTRAP`` (``BOOTSTRAP_ENV``) nor a cluster's
data dir says otherwise (:func:`clients.cli.main.resolve_bootstrap`; Kafka's default
port).

:func:`client_properties` turns ``KEY=VALUE`` pairs (``-X``, ``--producer-property``,
``--consumer-property``) into a client's keyword arguments through Kafka's names
(:mod:`clients.config.kafka_names`: ``linger.ms``, ``security.protocol``, ...; our own
keywords, ``linger_ms``, are accepted too), each value converted as its setting says.
A key that is none of the client's settings, or a bad value, is refused with one line
naming the option and the key as typed (Kafka's tools warn and ignore it; a typo here
would silently change nothing); a password is never shown.

This module imports no command module (``main`` imports the command modules; they never
import ``main``).
"""

from __future__ import annotations

from collections.abc import Sequence

from clients.config.kafka_names import ADMIN, CONSUMER, PRODUCER, ClientNames
from clients.protocol.errors import InvalidConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "MINIKAFKA_BOOTSTRAP"
_TABLES = {names.client: names for names in (ADMIN, PRODUCER, CONSUMER)}


class CliError(ValueError):
    """A user-facing failure: printed as one line, exit status 1."""


def client_properties(pairs: Sequence[str], option: str,
                      client: ClientNames | type = ADMIN) -> dict[str, object]:
    """``["linger.ms=5", "acks=all"]`` -> ``{"linger_ms": 5, "acks": "all"}`` for
    ``client`` (its table, or its class: Admin, Producer or Consumer)."""
    names = client if isinstance(client, ClientNames) else _TABLES[client.__name__]
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            shown = repr(key.strip()) if key.strip() else "an empty key"
            raise CliError(f"{option} takes KEY=VALUE, got {shown}")
        given[key.strip()] = text
    try:
        return names.translate(given, our_names=True)
    except InvalidConfigError as exc:
        raise CliError(f"{option}: {exc.message}") from None
