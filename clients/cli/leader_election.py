"""``minikafka leader-election``: elect preferred (or unclean) leaders through the admin
client (Kafka's ``kafka-leader-election.sh``).

``--election-type preferred|unclean`` with ``--topic T --partition P`` (one partition),
``--topic T`` (every partition of the topic) or ``--all-topic-partitions``.  Prints one
line per partition, as Kafka's tool: elected, not needed, or the error with its reason;
exits 1 when any partition failed with something other than ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition

__all__ = ["add_parser"]


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def cmd_leader_election(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    if args.all_topic_partitions == (args.topic is not None):
        raise CliError("give exactly one of --topic or --all-topic-partitions")
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    with Admin(args.bootstrap_server, **{**admin_settings(args),
                                             "request_timeout_ms": args.timeout_ms}) as admin:
        wanted: list[TopicPartition] | None = None
        if args.topic is not None:
            if args.partition is not None:
                wanted = [TopicPartition(args.topic, args.partition)]
            else:
                desc = admin.describe_topics([args.topic])[args.topic]
                wanted = [TopicPartition(args.topic, p.partition) for p in desc.partitions]
        results = admin.elect_leaders(args.election_type, wanted, raise_on_error=False)
    kind = args.election_type.upper()
    failed = 0
    elected = sorted(tp for tp, e in results.items() if e is None)
    if elected:
        print(f"Successfully completed leader election ({kind}) for partitions "
              f"{', '.join(_name(tp) for tp in elected)}")
    for tp, error in sorted((tp, e) for tp, e in results.items() if e is not None):
        if error.code == ErrorCode.ELECTION_NOT_NEEDED:
            print(f"Valid replica already elected for partitions {_name(tp)}")
        else:
            failed += 1
            print(f"Error completing leader election ({kind}) for partition "
                  f"{_name(tp)}: {error}")
    if not results:
        print("No partition needed an election.")
    return 1 if failed else 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    p = client("leader-election", "elect the preferred (or an unclean) leader of partitions")
    p.add_argument("--election-type", choices=("preferred", "unclean"), required=True)
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true")
    p.add_argument("--timeout-ms", type=int, default=30_000)
    p.set_defaults(func=cmd_leader_election)
