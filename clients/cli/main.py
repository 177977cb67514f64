"""The ``minikafka`` command line.

Client commands (``topics``, ``produce``, ``consume``, ``bench``) talk to a broker over
the wire protocol and take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092),
like Kafka's tools.  Server commands (``broker``, ``cluster``) run code from the
``broker`` package in a separate interpreter (``python -m broker ...``): the client
package never imports the broker (DESIGN.md §2), so the CLI crosses that line as a
process boundary.

Every command has ``--help``; a failure prints one line ``error: ...`` to stderr and
exits with status 1 (2 for usage errors, as argparse does).

This module holds the parser, the ``topics``, ``produce`` and ``consume`` commands and
:func:`main` (the ``minikafka`` console script; ``python -m clients.cli`` runs it through
:mod:`clients.cli.__main__`).  The other commands live in their own modules
(:mod:`clients.cli.bench`, :mod:`~clients.cli.demo`, :mod:`~clients.cli.groups`,
:mod:`~clients.cli.workload`), each adding its subparser; what they share with this one
(``CliError``, ``DEFAULT_BOOTSTRAP``) is :mod:`clients.cli.common`, so no command module
imports this one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from clients.cli import bench, demo, groups, workload
from clients.cli.common import DEFAULT_BOOTSTRAP, CliError

if TYPE_CHECKING:
    from clients.producer.future import RecordFuture
    from clients.producer.producer import Producer
from clients.protocol.errors import MiniKafkaError


def _parse_configs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--config expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _exec_module(module: str, args: Sequence[str]) -> int:
    """Replace this process by ``python -m module args`` (foreground server commands)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *args])
    return 0  # not reached


# -- topics ---------------------------------------------------------------------------


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


# -- produce / consume ------------------------------------------------------------------


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


# -- parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT")
        return p

    broker = sub.add_parser("broker", help="run a broker (python -m broker)", add_help=False)
    broker.add_argument("rest", nargs=argparse.REMAINDER)
    cluster = sub.add_parser("cluster", help="manage a local cluster (python -m broker.cluster)",
                             add_help=False)
    cluster.add_argument("rest", nargs=argparse.REMAINDER)

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

    bench.add_parser(sub, client)
    demo.add_parser(sub)
    groups.add_parser(sub, client)
    workload.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("broker", "cluster"):
        module = "broker" if argv[0] == "broker" else "broker.cluster"
        return _exec_module(module, argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except (MiniKafkaError, CliError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
