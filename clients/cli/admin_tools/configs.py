"""``minikafka configs``: describe and change topic and broker configs (Kafka's
``kafka-configs.sh``).

``configs --describe --entity-type topics --entity-name T`` (``--topic T`` for short,
``--broker N`` for ``--entity-type brokers --entity-name N``) prints, as Kafka does, the
configs set on the resource at run time (a topic's overrides; a broker's dynamic
``follower.replication.throttled.rate``, the only broker config that changes while it
runs), or with ``--all`` every config with its value and source::

    Dynamic configs for topic T are:
      retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}

``configs --alter ... --add-config k=v,k2=[a,b] --delete-config k3,k4`` sends one
IncrementalAlterConfigs (SET for each added, DELETE for each deleted: back to the
default) and prints ``Completed updating config for topic T.``.  Config names are
Kafka's dotted ones (ours with ``_`` are accepted too).  What the broker refuses comes
back as its error, e.g. INVALID_CONFIG for an unknown topic config, and INVALID_REQUEST
for a static broker config (read-only in ``--describe``; Kafka's "Cannot update these
configs dynamically"): one ``error: ...`` line, exit status 1.  A broker id
that is not in the cluster is refused the same way (``broker 9 is not in the cluster``),
before any config request.  Without a name, ``--describe`` covers every topic (or every
broker).

Costs: one admin round trip per resource kind (broker resources: one per broker, plus
DescribeCluster to check the id), plus Metadata to list the resources when no name is
given.  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.types import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
)

__all__ = ["add_parser"]

ENTITY_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER}
SINGULAR = {ConfigResourceType.TOPIC: "topic", ConfigResourceType.BROKER: "broker"}
SHOWN_SOURCES = (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
                 ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


def split_config_list(text: str) -> list[str]:
    """Kafka's ``--add-config`` list: commas separate, except inside ``[...]`` (a list
    value, whose brackets are dropped: ``cleanup.policy=[compact,delete]``)."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip().replace("[", "").replace("]", "") for i in items if i.strip()]


def _resource(args: argparse.Namespace) -> tuple[ConfigResourceType, str | None]:
    given = [(ConfigResourceType.TOPIC, args.topic)] if args.topic else []
    given += [(ConfigResourceType.BROKER, args.broker)] if args.broker else []
    if args.entity_type is not None:
        given.append((ENTITY_TYPES[args.entity_type], args.entity_name))
    elif args.entity_name is not None:
        raise CliError("--entity-name needs --entity-type topics|brokers")
    if len(given) != 1:
        raise CliError("name one resource: --entity-type topics|brokers [--entity-name X], "
                       "--topic T or --broker N")
    return given[0]


def _line(entry: ConfigEntry) -> str:
    value = "null" if entry.value is None else entry.value
    synonyms = ", ".join(f"{ConfigSource(s).name}:{n}={v}" for n, v, s in entry.synonyms)
    return (f"  {entry.name}={value} sensitive={str(entry.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}")


def _describe(admin: Any, kind: ConfigResourceType, name: str | None, all_: bool) -> None:
    if name is not None:
        names = [name]
    elif kind == ConfigResourceType.TOPIC:
        names = admin.list_topics()
    else:
        names = [str(b.node_id) for b in admin.describe_cluster().brokers]
    found = admin.describe_configs([ConfigResource(kind, n) for n in names],
                                   include_synonyms=True)
    for n in names:
        entries: dict[str, ConfigEntry] = found[ConfigResource(kind, n)]
        shown = sorted((e for e in entries.values() if all_ or e.source in SHOWN_SOURCES),
                       key=lambda e: e.name)
        print(f"{'All' if all_ else 'Dynamic'} configs for {SINGULAR[kind]} {n} are:")
        for e in shown:
            print(_line(e))


def _check_broker(admin: Any, name: str) -> None:
    """A broker resource names a broker of the cluster (its id), or the command fails
    with one line naming the brokers there are (the request would go to no one)."""
    ids = sorted(b.node_id for b in admin.describe_cluster().brokers)
    if not name.strip().isdigit():
        raise CliError(f"the entity name for brokers must be a broker id (an integer), got "
                       f"{name!r}; the brokers are {', '.join(map(str, ids))}")
    if int(name) not in ids:
        raise CliError(f"broker {name} is not in the cluster: no such broker id (the "
                       f"brokers are {', '.join(map(str, ids))})")


def _alter(admin: Any, kind: ConfigResourceType, name: str, add: list[str],
           delete: list[str]) -> None:
    ops: list[AlterConfigOp] = []
    for pair in add:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--add-config expects k=v[,k=v...], got {pair!r}")
        ops.append(AlterConfigOp(key.strip(), value.strip(), AlterConfigOpType.SET))
    ops += [AlterConfigOp(k, None, AlterConfigOpType.DELETE) for k in delete]
    if not ops:
        raise CliError("--alter needs --add-config and/or --delete-config")
    admin.incremental_alter_configs({ConfigResource(kind, name): ops})
    print(f"Completed updating config for {SINGULAR[kind]} {name}.")


def cmd_configs(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    if args.describe == args.alter:
        raise CliError("configs: give --describe or --alter")
    kind, name = _resource(args)
    add = [i for text in args.add_config for i in split_config_list(text)]
    delete = [i for text in args.delete_config for i in split_config_list(text)]
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        if kind == ConfigResourceType.BROKER and name:
            _check_broker(admin, name)
        if args.describe:
            _describe(admin, kind, name, args.all)
        else:
            if name is None:
                raise CliError("--alter needs --entity-name (or --topic / --broker)")
            _alter(admin, kind, name, add, delete)
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    p = client("configs", "describe and change topic and broker configs")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    p.add_argument("--entity-type", choices=sorted(ENTITY_TYPES), default=None)
    p.add_argument("--entity-name", default=None)
    p.add_argument("--topic", default=None, help="--entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", default=None, metavar="ID",
                   help="--entity-type brokers --entity-name ID")
    p.add_argument("--all", action="store_true", help="describe: every config, defaults too")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V,K=[A,B]")
    p.add_argument("--delete-config", action="append", default=[], metavar="K,K")
    p.set_defaults(func=cmd_configs)
