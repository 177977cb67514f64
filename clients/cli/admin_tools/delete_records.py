"""``minikafka delete-records``: delete a partition's records before an offset (Kafka's
``kafka-delete-records.sh``).

``delete-records --topic T --partition P --offset O`` deletes every record of T-P below
offset O (``-1``: below the high watermark) with DeleteRecords to the partition's
leader, and prints the new low watermark (log start offset) as Kafka does::

    Records delete operation completed:
    partition: T-P	low_watermark: N

An offset above the high watermark is the broker's OFFSET_OUT_OF_RANGE, an unknown
partition UNKNOWN_TOPIC_OR_PARTITION: one ``error: ...`` line, exit status 1.

Costs: Metadata plus one DeleteRecords round trip.  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from clients.cli.connect.settings import admin_settings
from clients.protocol.topics import TopicPartition

__all__ = ["add_parser"]


def cmd_delete_records(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    tp = TopicPartition(args.topic, args.partition)
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        low = admin.delete_records({tp: args.offset})[tp]
    print("Records delete operation completed:")
    print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {low}")
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    p = client("delete-records", "delete a partition's records before an offset")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--offset", type=int, required=True,
                   help="records below it are deleted (-1: below the high watermark)")
    p.set_defaults(func=cmd_delete_records)
