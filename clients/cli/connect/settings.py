"""The client settings of a ``minikafka`` client command: ``--command-config FILE`` and
``-X KEY=VALUE`` / ``--command-property KEY=VALUE``, as Kafka's tools and kcat take them.

Every client command (``topics``, ``groups``, ``configs``, ``produce``, ``consume``,
...) takes both (:func:`add_options`; after an action too: ``topics list
--command-config f``).  ``produce`` and ``consume`` spell them as Kafka's console tools
do as well: ``--producer.config`` / ``--consumer.config`` for the file,
``--producer-property`` / ``--consumer-property`` for a pair (same destination).

:func:`client_settings` reads the file (:func:`clients.config.properties.read_properties`:
Java properties, strict, errors with line numbers) and translates it, then the pairs,
with the command's table (``args.client_names``: :data:`~clients.config.kafka_names.ADMIN`
for admin commands, ``PRODUCER`` / ``CONSUMER`` for ``produce`` / ``consume``; our own
keywords are accepted too, ``linger_ms``); a pair overrides the file, setting by setting.
An unknown name or a bad value is a :class:`~clients.cli.common.CliError` naming the file
or option and the setting, never a password; so is a SASL ``security.protocol``
without ``sasl.mechanism`` (Kafka's default, GSSAPI, is not served) or credentials.
``bootstrap.servers`` from them is used when ``--bootstrap-server`` is not given
(:func:`clients.cli.main.main`).

Costs: reading one small file.  Thread safety: called once per command, in one thread.
"""

from __future__ import annotations

import argparse
from typing import Any

from clients.cli.common import CliError, client_properties
from clients.config.kafka_names import ADMIN, ADMIN_KEYWORDS, ClientNames
from clients.config.properties import read_properties
from clients.protocol.errors import InvalidConfigError

__all__ = ["add_options", "admin_settings", "client_settings"]

_PROPERTY_OPTION = {"Producer": "--producer-property", "Consumer": "--consumer-property"}


def add_options(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--command-config`` and ``-X`` on ``parser`` (``suppress``: on an action's parser,
    where an unset option must not hide one given before the action)."""
    parser.add_argument("--command-config", default=argparse.SUPPRESS if suppress else None,
                        metavar="FILE", help="client settings in a Java properties file "
                        "(Kafka's names: security.protocol, sasl.jaas.config, ...)")
    parser.add_argument("-X", "--command-property", dest="command_property", action="append",
                        default=argparse.SUPPRESS if suppress else [], metavar="KEY=VALUE",
                        help="a client setting (Kafka's name; repeatable; overrides the file)")


def client_settings(args: argparse.Namespace) -> dict[str, object]:
    """The keywords of the command's client from ``--command-config`` and ``-X``."""
    names: ClientNames = getattr(args, "client_names", ADMIN)
    out: dict[str, object] = {}
    path = getattr(args, "command_config", None)
    if path:
        try:
            out.update(names.translate(read_properties(path), our_names=True))
        except InvalidConfigError as exc:
            where = "" if exc.message.startswith(str(path)) else f"{path}: "
            raise CliError(f"--command-config {where}{exc.message}") from None
    option = _PROPERTY_OPTION.get(names.client, "-X/--command-property")
    out.update(client_properties(getattr(args, "command_property", None) or [], option,
                                 names))
    _check_login(out)
    return out


def _check_login(settings: dict[str, object]) -> None:
    """A SASL protocol without a mechanism or credentials, said in Kafka's names (the
    client would say it in its keywords)."""
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    if not protocol.startswith("SASL_"):
        return
    if settings.get("sasl_mechanism") is None:
        raise CliError(f"security.protocol={protocol} needs sasl.mechanism (SCRAM-SHA-256, "
                       "SCRAM-SHA-512 or PLAIN; Kafka's default, GSSAPI, is not supported)")
    if not settings.get("sasl_plain_username") or not settings.get("sasl_plain_password"):
        raise CliError(f"security.protocol={protocol} needs sasl.username and sasl.password "
                       "(or sasl.jaas.config)")


def admin_settings(args: argparse.Namespace) -> dict[str, Any]:
    """What an Admin built by the command takes of its settings (no bootstrap)."""
    settings: dict[str, object] = getattr(args, "client_settings", {})
    return {k: v for k, v in settings.items() if k in ADMIN_KEYWORDS}
