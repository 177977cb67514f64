"""``minikafka topics``: create, list, describe, alter and delete topics through the admin
client.

Kafka's ``kafka-topics.sh`` is the model: each action is a subcommand
(``topics create NAME``) or Kafka's flag (``topics --create --topic NAME``), see
:mod:`clients.cli.actions`.  Each action prints what it did (or the topics' partitions,
leaders, replicas and ISR) and fails with one ``error: ...`` line, exit status 1.

- ``create`` (``--partitions``, ``--replication-factor``, ``--config k=v``, a list
  value as ``k=a,b`` or kafka-configs.sh's ``k=[a,b]``; ``--if-not-exists``: a topic that
  exists is no error); a bad count, factor or config is the broker's answer
  (INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, Kafka's messages);
- ``delete`` (``--if-exists``: a topic that does not exist is no error);
- ``alter --partitions N`` (CreatePartitions: grows the topic to N partitions);
- ``describe`` (one topic or all; ``--if-exists``: a missing topic prints nothing): a
  header line per topic with its id (``TopicId:``, Kafka's base64 form, when the broker
  has one) and its effective configs under Kafka's dotted names (DescribeConfigs), then
  a line per partition;
  ``--under-replicated-partitions`` (ISR smaller than the replicas) and
  ``--unavailable-partitions`` (no leader, or a leader that is not a live broker) print
  only the matching partition lines, as Kafka does;
- ``list``.

Costs: one or two admin round trips per action (describe: Metadata, DescribeConfigs,
and DescribeCluster for the unavailable filter).  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from clients.cli.actions import Action, action_of, add_actions, named
from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.types import ConfigEntry, ConfigResource, ConfigResourceType, PartitionInfo

__all__ = ["add_parser"]

ACTIONS: tuple[Action, ...] = (
    ("create", "create a topic", "TOPIC", "the topic's name"),
    ("list", "list topic names", None, ""),
    ("describe", "show partitions, leaders, replicas, ISR and configs", "TOPIC",
     "one topic (default: all)"),
    ("alter", "add partitions to a topic (--partitions N)", "TOPIC", "the topic's name"),
    ("delete", "delete a topic", "TOPIC", "the topic's name"),
)


def _parse_configs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--config expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]  # kafka-configs.sh's list syntax, [a,b]: a,b on the wire
        out[key.strip()] = value
    return out


def _partition_line(p: PartitionInfo) -> str:
    return (f"\tTopic: {p.topic}\tPartition: {p.partition}\tLeader: {p.leader}\t"
            f"LeaderEpoch: {p.leader_epoch}\tReplicas: {','.join(map(str, p.replicas))}\t"
            f"Isr: {','.join(map(str, p.isr))}")


def _describe(admin: Any, args: argparse.Namespace) -> None:
    name = getattr(args, "name", None) or args.topic
    names = [name] if name else admin.list_topics()
    if name and args.if_exists and name not in admin.list_topics():
        return
    descriptions = admin.describe_topics(names)
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    if filtered:
        live = ({b.node_id for b in admin.describe_cluster().brokers}
                if args.unavailable_partitions else set())
        for desc in descriptions.values():
            for p in desc.partitions:
                under = len(p.isr) < len(p.replicas)
                unavailable = p.leader < 0 or p.leader not in live
                if (args.under_replicated_partitions and under) or \
                        (args.unavailable_partitions and unavailable):
                    print(_partition_line(p))
        return
    configs = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, n) for n in descriptions])
    for desc in descriptions.values():
        entries: dict[str, ConfigEntry] = configs.get(
            ConfigResource(ConfigResourceType.TOPIC, desc.name), {})
        shown = ",".join(f"{k}={e.value}" for k, e in sorted(entries.items())
                         if e.value is not None)
        rf = len(desc.partitions[0].replicas) if desc.partitions else 0
        topic_id = "" if desc.topic_id is None else f"TopicId: {desc.topic_id}\t"
        print(f"Topic: {desc.name}\t{topic_id}PartitionCount: {len(desc.partitions)}\t"
              f"ReplicationFactor: {rf}\tConfigs: {shown}")
        for p in desc.partitions:
            print(_partition_line(p))


def cmd_topics(args: argparse.Namespace) -> int:
    from clients.admin import Admin
    from clients.types import NewTopic

    action = action_of(args, "topics", ACTIONS)
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        if action == "list":
            for name in sorted(admin.list_topics()):
                print(name)
        elif action == "describe":
            _describe(admin, args)
        elif action == "create":
            name = named(args, "topic", "topic")
            try:
                admin.create_topics([NewTopic(name, args.partitions, args.replication_factor,
                                              _parse_configs(args.config))])
            except MiniKafkaError as exc:
                if not (args.if_not_exists and exc.code == ErrorCode.TOPIC_ALREADY_EXISTS):
                    raise
                print(f"Topic {name} already exists.")
                return 0
            print(f"Created topic {name}.")
        elif action == "delete":
            name = named(args, "topic", "topic")
            try:
                admin.delete_topics([name])
            except MiniKafkaError as exc:
                if not (args.if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    raise
                print(f"Topic {name} does not exist.")
                return 0
            print(f"Deleted topic {name}.")
        else:  # alter
            name = named(args, "topic", "topic")
            if args.partitions == -1:
                raise CliError("topics alter: give the new partition count (--partitions N)")
            if args.partitions < 1:  # (the Admin refuses a count below 1 before sending)
                raise MiniKafkaError("Number of partitions was set to an invalid "
                                     "non-positive value.", ErrorCode.INVALID_PARTITIONS)
            try:
                admin.create_partitions({name: args.partitions})
            except MiniKafkaError as exc:
                if not (args.if_exists and exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    raise
                print(f"Topic {name} does not exist.")
                return 0
            print(f"Topic {name} has {args.partitions} partitions.")
    return 0


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", default=None, metavar="TOPIC", help="the topic (Kafka's flag)")
    p.add_argument("--partitions", type=int, default=-1,
                   help="partition count (create; alter: the new, larger count)")
    p.add_argument("--replication-factor", type=int, default=-1)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config at creation (Kafka's names or ours)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="create: a topic that already exists is no error")
    p.add_argument("--if-exists", action="store_true",
                   help="alter, delete, describe: a topic that does not exist is no error")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="describe: only partitions whose ISR is smaller than the replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="describe: only partitions without a live leader")


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    topics = client("topics", "create, list, describe, alter and delete topics")
    add_actions(topics, ACTIONS, _options)
    topics.set_defaults(func=cmd_topics)
