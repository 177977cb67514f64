"""``minikafka topics``: create, list, describe and delete topics through the admin client.

Kafka's ``kafka-topics.sh`` is the model; each action prints what it did (or the topics'
partitions, leaders, replicas and ISR) and fails with one ``error: ...`` line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from clients.cli.common import CliError

__all__ = ["add_parser"]


def _parse_configs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--config expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out



def cmd_topics(args: argparse.Namespace) -> int:
    from clients.admin import Admin
    from clients.types import NewTopic

    with Admin(args.bootstrap_server) as admin:
        if args.topics_command == "create":
            admin.create_topics([NewTopic(args.name, args.partitions, args.replication_factor,
                                          _parse_configs(args.config))])
            print(f"Created topic {args.name}.")
        elif args.topics_command == "delete":
            admin.delete_topics([args.name])
            print(f"Deleted topic {args.name}.")
        elif args.topics_command == "list":
            for name in sorted(admin.list_topics()):
                print(name)
        else:
            names = [args.name] if args.name else sorted(admin.list_topics())
            for desc in admin.describe_topics(names).values():
                configs = ",".join(f"{k}={v}" for k, v in sorted(desc.configs.items()))
                print(f"Topic: {desc.name}\tPartitionCount: {len(desc.partitions)}\t"
                      f"Configs: {configs}")
                for p in desc.partitions:
                    print(f"\tPartition: {p.partition}\tLeader: {p.leader}\t"
                          f"LeaderEpoch: {p.leader_epoch}\tReplicas: "
                          f"{','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    topics = client("topics", "create, list, describe and delete topics")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    tsub.add_parser("list", help="list topic names")
    describe = tsub.add_parser("describe", help="show partitions, leaders and replicas")
    describe.add_argument("name", nargs="?")
    delete = tsub.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    for p in (create, describe, delete, tsub.choices["list"]):
        p.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
    topics.set_defaults(func=cmd_topics)
