"""``minikafka consume``: print a topic's records, one per line (no group: assigned partitions).

Kafka's ``kafka-console-consumer.sh`` is the model; ``--group`` is served by
:mod:`clients.cli.groups`.  Stops after ``--max-messages`` or ``--timeout-ms`` without a
new record.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_parser"]


def cmd_consume(args: argparse.Namespace) -> int:
    import time

    from clients.consumer.consumer import Consumer
    from clients.protocol.topics import TopicPartition

    with Consumer(bootstrap_servers=args.bootstrap_server,
                  auto_offset_reset="earliest" if args.from_beginning else "latest",
                  isolation_level=args.isolation_level) as consumer:
        if args.partition is not None:
            partitions = [TopicPartition(args.topic, args.partition)]
        else:
            partitions = [TopicPartition(args.topic, p)
                          for p in consumer.partitions_for(args.topic) or []]
        consumer.assign(partitions)
        if args.offset is not None:
            for tp in partitions:
                consumer.seek(tp, args.offset)
        elif args.from_beginning:
            consumer.seek_to_beginning(partitions)
        received = 0
        deadline = time.monotonic() + args.timeout_ms / 1000
        while args.max_messages is None or received < args.max_messages:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            batch = consumer.poll(timeout_ms=min(remaining_ms, 500))
            for records in batch.values():
                for record in records:
                    value = b"" if record.value is None else record.value
                    if args.print_key:
                        key = b"null" if record.key is None else record.key
                        sys.stdout.write(f"{key.decode(errors='replace')}\t")
                    sys.stdout.write(value.decode(errors="replace") + "\n")
                    received += 1
                    if args.max_messages is not None and received >= args.max_messages:
                        break
                    deadline = time.monotonic() + args.timeout_ms / 1000
        sys.stdout.flush()
    print(f"Processed a total of {received} messages", file=sys.stderr)
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    consume = client("consume", "print records of a topic, one per line")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=10_000,
                         help="stop after this long without a new record")
    consume.add_argument("--partition", type=int, default=None)
    consume.add_argument("--offset", type=int, default=None)
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--isolation-level", default="read_uncommitted",
                         choices=["read_uncommitted", "read_committed"],
                         help="read_committed: only records of committed transactions")
    consume.set_defaults(func=cmd_consume)
