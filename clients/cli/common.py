"""What the ``minikafka`` command modules share: the user-facing error, the default
address and ``key=value`` client properties.

:class:`CliError` is raised by any command (``main``, ``groups``, ``workload``, ...) for
a failure the user caused or can fix; :func:`clients.cli.main.main` prints it as one
line ``error: ...`` and exits with status 1.

``DEFAULT_BOOTSTRAP`` is the broker address client commands use when neither
``--bootstrap-server``, ``MINIKAFKA_BOOTSTRAP`` (``BOOTSTRAP_ENV``) nor a cluster's
data dir says otherwise (:func:`clients.cli.main.resolve_bootstrap`; Kafka's default
port).

:func:`client_properties` turns ``--producer-property`` / ``--consumer-property``
``KEY=VALUE`` pairs (Kafka's dotted names, ``linger.ms``, or ours, ``linger_ms``) into
keyword arguments; values become int, float or bool when they read as one. Given the
client class, a key that is none of its settings is refused with one line naming the key
as typed (Kafka's tools warn and ignore it; a typo here would silently change nothing).

This module imports nothing from the project, so every command module may import it
(``main`` imports the command modules; they never import ``main``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "MINIKAFKA_BOOTSTRAP"


class CliError(ValueError):
    """A user-facing failure: printed as one line, exit status 1."""


def client_properties(pairs: Sequence[str], option: str,
                      client: type | None = None) -> dict[str, object]:
    """``["linger.ms=5", "acks=all"]`` -> ``{"linger_ms": 5, "acks": "all"}``; with
    ``client``, only the keyword arguments its constructor takes."""
    known = set(inspect.signature(client).parameters) if client is not None else None
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{option} takes KEY=VALUE, got {pair!r}")
        name = key.strip().replace(".", "_").replace("-", "_")
        if known is not None and client is not None and name not in known:
            raise CliError(f"{option}: unknown {client.__name__} setting {key.strip()!r}")
        out[name] = _typed(text.strip())
    return out


def _typed(text: str) -> object:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
