"""``minikafka get-offsets``: partitions' offsets by time, as Kafka's ``kafka-get-offsets.sh``.

``get-offsets --topic T [--partitions 0,2] [--time -1|-2|latest|earliest|<ms>]``
prints one line ``TOPIC:PARTITION:OFFSET`` per partition (Kafka's format): ``-1`` /
``latest`` (default) the high watermark (the last stable offset with
``--isolation read_committed``), ``-2`` / ``earliest`` the log start offset, a
timestamp in ms the offset of the first record stamped at or after it (a partition
without one prints no line, as Kafka does).  An unknown topic or partition is one
``error: ...`` line, exit status 1.

Costs: Metadata plus one ListOffsets round trip per leader.  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition

__all__ = ["add_parser"]

NAMED_TIMES = {"latest": -1, "earliest": -2}


def _time(text: str) -> int:
    spec = NAMED_TIMES.get(text.lower())
    if spec is not None:
        return spec
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"--time: {text!r} is not -1, -2, latest, earliest or a timestamp "
                       "in ms") from None
    if value < -2:
        raise CliError(f"--time: {value} is not -1, -2 or a timestamp >= 0")
    return value


def cmd_get_offsets(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    spec = _time(args.time)
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        known = [p.partition for p in admin.describe_topics([args.topic])[args.topic].partitions]
        if args.partitions:
            try:
                wanted = [int(p) for p in args.partitions.split(",")]
            except ValueError:
                raise CliError(f"--partitions: {args.partitions!r} is not a list of "
                               "numbers") from None
            unknown = sorted(set(wanted) - set(known))
            if unknown:
                raise CliError(f"UNKNOWN_TOPIC_OR_PARTITION: {args.topic} has no partition "
                               f"{', '.join(map(str, unknown))}")
        else:
            wanted = known
        found = admin.list_offsets({TopicPartition(args.topic, p): spec for p in wanted},
                                   isolation_level=int(args.isolation == "read_committed"))
    for tp, o in sorted(found.items()):
        if isinstance(o, MiniKafkaError):  # (raised by list_offsets; for the type checker)
            raise o
        if o.offset >= 0:
            print(f"{tp.topic}:{tp.partition}:{o.offset}")
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    p = client("get-offsets", "offsets of a topic's partitions: latest, earliest or by time")
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", default=None, metavar="P,P,...",
                   help="these partitions only (default: all)")
    p.add_argument("--time", default="-1", metavar="-1|-2|MS",
                   help="-1/latest (default), -2/earliest, or a timestamp in ms")
    p.add_argument("--isolation", choices=("read_uncommitted", "read_committed"),
                   default="read_uncommitted")
    p.set_defaults(func=cmd_get_offsets)
