"""``minikafka produce``: lines from stdin, one record each (optionally keyed, transactional).

Kafka's ``kafka-console-producer.sh`` is the model.  Every record is acknowledged before
the command exits; a failure aborts an open transaction and is reported as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clients.cli.common import CliError

if TYPE_CHECKING:
    from clients.producer.future import RecordFuture
    from clients.producer.producer import Producer

__all__ = ["add_parser"]


def cmd_produce(args: argparse.Namespace) -> int:
    """Lines from stdin, one record each.  With ``--transactional-id`` every record goes
    in one transaction committed at the end (or one per ``--transaction-size`` records);
    a failure aborts the open transaction before the error is reported."""
    from clients.producer.producer import Producer

    acks: int | str = args.acks if args.acks == "all" else int(args.acks)
    size = args.transaction_size
    if size is not None and (args.transactional_id is None or size < 1):
        raise CliError("--transaction-size needs --transactional-id and must be >= 1")
    with Producer(bootstrap_servers=args.bootstrap_server, acks=acks,
                  linger_ms=args.linger_ms, transactional_id=args.transactional_id) as producer:
        if args.transactional_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
        try:
            futures = _produce_lines(args, producer)
        except Exception:
            if args.transactional_id is not None:
                with contextlib.suppress(Exception):  # the original error is the one to report
                    producer.abort_transaction()
            raise
        count = len(futures)
        producer.flush()
        for future in futures:
            future.result()
    what = "messages" if args.transactional_id is None else "messages in transactions"
    print(f"Produced {count} {what} to {args.topic}.", file=sys.stderr)
    return 0


def _produce_lines(args: argparse.Namespace, producer: Producer) -> list[RecordFuture]:
    futures: list[RecordFuture] = []
    transactional = args.transactional_id is not None
    in_transaction = 0
    for line in sys.stdin:
        line = line.rstrip("\n")
        key = None
        if args.key_separator and args.key_separator in line:
            raw_key, line = line.split(args.key_separator, 1)
            key = raw_key.encode()
        futures.append(producer.send(args.topic, line.encode(), key=key,
                                     partition=args.partition))
        in_transaction += 1
        if transactional and args.transaction_size == in_transaction:
            producer.commit_transaction()
            producer.begin_transaction()
            in_transaction = 0
    if transactional:
        producer.commit_transaction()  # the last (maybe empty: nothing is sent then)
    return futures


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    produce = client("produce", "produce lines from stdin, one record per line")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", default=None,
                         help="split each line into key and value at the first separator")
    produce.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"],
                         help="all (default) also enables idempotence, as in Kafka 3")
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--transactional-id", default=None, metavar="ID",
                         help="produce in a transaction (all input, or see --transaction-size)")
    produce.add_argument("--transaction-size", type=int, default=None, metavar="N",
                         help="commit a transaction every N records")
    produce.set_defaults(func=cmd_produce)
