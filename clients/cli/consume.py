"""``minikafka consume``: print a topic's records (assigned partitions, or as a member of
``--group``).

Kafka's ``kafka-console-consumer.sh`` is the model.  What is read:

- the topic: the positional argument or ``--topic``; or ``--include REGEX`` (every
  non-internal topic whose whole name matches, when the command starts).  A topic the
  cluster does not know, or ``--partition`` beyond its partitions, is an error (exit 1)
  before anything is read; ``--offset`` needs ``--partition`` (a usage error, exit 2),
  and ``--group`` excludes both.
- without ``--group``: the partitions are assigned (all, or ``--partition``), from
  ``--offset``, the beginning (``--from-beginning``) or the end.
- with ``--group``: the consumer subscribes and the group splits the partitions;
  ``--from-beginning`` applies only to partitions the group never committed.  Each
  printed batch's next offsets are committed after they were written to stdout
  (at-least-once; auto commit is off), and on exit the positions of every assigned
  partition are committed, so a new group that read nothing still shows its offsets in
  ``groups describe`` (Kafka's console consumer commits on close the same way).

When it stops: after ``--max-messages``, after ``--timeout-ms`` without a new record
(counted from the group's first assignment, not from the start: joining takes a few
seconds), or with ``--follow`` only on Ctrl-C (then exit 0).  Printing is
:mod:`clients.cli.record_format` (``--format``, ``--json``, ``--print-key``,
``--null-literal``); ``--consumer-property KEY=VALUE`` passes any consumer setting.

Costs: one Metadata round trip per topic before reading, then the consumer's own.
Thread safety: a command runs in one thread.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.cli.produce import topic_of
from clients.cli.record_format import RecordPrinter
from clients.config.kafka_names import CONSUMER
from clients.protocol.topics import TopicPartition

if TYPE_CHECKING:
    from clients.consumer.consumer import Consumer

__all__ = ["add_parser"]

GROUP_JOIN_TIMEOUT_S = 60.0  # how long a --group consumer may wait for its assignment
_UNKNOWN_TOPIC_GRACE_S = 1.0  # a topic created a moment ago may not be in metadata yet


class _Progress:
    """What a consume run has done so far; also its rebalance listener (when the group
    first gave this consumer its partitions)."""

    def __init__(self) -> None:
        self.assigned_at: float | None = None
        self.received = 0
        # partitions whose polled records were not all printed (--max-messages cut the
        # batch, or Ctrl-C came mid-batch): their position is past what was printed
        self.unprinted: set[TopicPartition] = set()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.assigned_at is None:
            self.assigned_at = time.monotonic()


def _topics(args: argparse.Namespace) -> list[str]:
    if args.include is None:
        return [topic_of(args)]
    if args.topic is not None or args.topic_option is not None:
        args.usage_error("--include excludes a topic name")
    try:
        pattern = re.compile(args.include)
    except re.error as exc:
        raise CliError(f"--include {args.include!r} is not a regular expression: {exc}") \
            from None
    from clients.admin import Admin

    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        names = admin.list_topics()
    topics = sorted(t for t in names if pattern.fullmatch(t) and not t.startswith("__"))
    if not topics:
        raise CliError(f"no topic matches --include {args.include!r}")
    return topics


def partitions_of(consumer: Consumer, topic: str) -> list[int]:
    """The topic's partition ids; unknown topic -> CliError (after a short grace)."""
    deadline = time.monotonic() + _UNKNOWN_TOPIC_GRACE_S
    while True:
        parts = consumer.partitions_for(topic)
        if parts:
            return parts
        if time.monotonic() >= deadline:
            raise CliError(f"unknown topic {topic!r} (UNKNOWN_TOPIC_OR_PARTITION)")
        time.sleep(0.2)


def cmd_consume(args: argparse.Namespace) -> int:
    from clients.consumer.consumer import Consumer

    if args.offset is not None and args.partition is None:
        args.usage_error("--offset needs --partition")
    if args.group is not None and (args.partition is not None or args.offset is not None):
        args.usage_error("--group cannot be combined with --partition or --offset")
    if args.include is not None and args.partition is not None:
        args.usage_error("--partition needs one topic, not --include")
    printer = RecordPrinter(fmt=args.format, as_json=args.json, print_key=args.print_key,
                            null_literal=args.null_literal)
    topics = _topics(args)
    options: dict[str, Any] = {
        "group_id": args.group, "enable_auto_commit": False,
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        "isolation_level": args.isolation_level,
    }  # fmt: skip
    options.update(args.client_settings)  # --consumer.config, --consumer-property
    try:
        consumer = Consumer(bootstrap_servers=args.bootstrap_server, **options)
    except TypeError as exc:  # a --consumer-property the consumer does not know
        raise CliError(f"--consumer-property: {exc}") from None
    with consumer:
        partitions = {t: partitions_of(consumer, t) for t in topics}
        if args.partition is not None and args.partition not in partitions[topics[0]]:
            n = len(partitions[topics[0]])
            raise CliError(f"unknown partition {topics[0]}-{args.partition}: the topic has "
                           f"{n} partitions (0..{n - 1}) (UNKNOWN_TOPIC_OR_PARTITION)")
        progress = _Progress()
        if args.group is not None:
            consumer.subscribe(topics, progress)
        else:
            _assign(args, consumer, topics, partitions)
            progress.assigned_at = time.monotonic()
        try:
            _read(args, consumer, printer, progress)
        except KeyboardInterrupt:
            if not args.follow:
                raise
        finally:
            if args.group is not None and progress.assigned_at is not None:
                _commit_positions(consumer, progress.unprinted)
    received = progress.received
    print(f"Processed a total of {received} messages", file=sys.stderr)
    return 0


def _assign(args: argparse.Namespace, consumer: Consumer, topics: list[str],
            partitions: dict[str, list[int]]) -> None:  # fmt: skip
    if args.partition is not None:
        tps = [TopicPartition(topics[0], args.partition)]
    else:
        tps = [TopicPartition(t, p) for t in topics for p in partitions[t]]
    consumer.assign(tps)
    if args.offset is not None:
        for tp in tps:
            consumer.seek(tp, args.offset)
    elif args.from_beginning:
        consumer.seek_to_beginning(tps)


def _read(args: argparse.Namespace, consumer: Consumer, printer: RecordPrinter,
          progress: _Progress) -> None:  # fmt: skip
    """Poll and print until a stop condition (module docstring), counting in ``progress``."""
    join_deadline = time.monotonic() + max(GROUP_JOIN_TIMEOUT_S, args.timeout_ms / 1000)
    last_record: float | None = None
    write = sys.stdout.write
    limit = args.max_messages
    while limit is None or progress.received < limit:
        now = time.monotonic()
        start = last_record if last_record is not None else progress.assigned_at
        if start is None:
            if now > join_deadline:
                raise CliError(f"group {args.group!r} gave no assignment within "
                               f"{max(GROUP_JOIN_TIMEOUT_S, args.timeout_ms / 1000):.0f} s")
            remaining_ms = 500
        elif args.follow:
            remaining_ms = 500
        else:
            remaining_ms = int((start + args.timeout_ms / 1000 - now) * 1000)
            if remaining_ms <= 0:
                break
        batch = consumer.poll(timeout_ms=min(remaining_ms, 500))
        progress.unprinted.update(batch)
        done: dict[TopicPartition, int] = {}
        for tp, records in batch.items():
            for record in records:
                if limit is not None and progress.received >= limit:
                    break
                write(printer(record))
                done[tp] = record.offset + 1
                progress.received += 1
        if done:
            sys.stdout.flush()  # written before committed: at-least-once
            if args.group is not None:
                consumer.commit(dict(done))
            last_record = time.monotonic()
        progress.unprinted -= {tp for tp, records in batch.items()
                               if not records or done.get(tp) == records[-1].offset + 1}
    sys.stdout.flush()


def _commit_positions(consumer: Consumer, unprinted: set[TopicPartition]) -> None:
    """Commit where every assigned partition stands, but for those whose last polled
    records were not all printed (their printed part is committed already).  Best
    effort: leaving the group is what matters on the way out."""
    with contextlib.suppress(Exception):
        consumer.commit({tp: consumer.position(tp) for tp in consumer.assignment()
                         if tp not in unprinted})


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    consume = client("consume", "print records of a topic, one per line")
    consume.add_argument("topic", nargs="?", default=None)
    consume.add_argument("--topic", dest="topic_option", default=None, metavar="TOPIC",
                         help="the topic (Kafka's spelling of the positional argument)")
    consume.add_argument("--include", default=None, metavar="REGEX",
                         help="every topic whose whole name matches (instead of a topic)")
    consume.add_argument("--group", default=None, metavar="GROUP",
                         help="consume as a member of GROUP (subscribe; commits offsets)")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=10_000,
                         help="stop after this long without a new record (with --group: "
                              "counted from the assignment)")
    consume.add_argument("--follow", action="store_true",
                         help="never stop for lack of records: until Ctrl-C")
    consume.add_argument("--partition", type=int, default=None)
    consume.add_argument("--offset", type=int, default=None, help="needs --partition")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--format", default=None, metavar="FMT",
                         help="kcat-like: %%t %%p %%o %%T %%k %%s %%h %%K %%S, e.g. "
                              "'%%p:%%o %%k=%%s\\n'")
    consume.add_argument("--json", action="store_true",
                         help="one JSON object per record (null apart from empty)")
    consume.add_argument("--null-literal", default="null", metavar="TEXT",
                         help="how a null key or value prints (default: null)")
    consume.add_argument("--isolation-level", default="read_uncommitted",
                         choices=["read_uncommitted", "read_committed"],
                         help="read_committed: only records of committed transactions")
    consume.add_argument("--consumer-property", dest="command_property", action="append",
                         default=[], metavar="KEY=VALUE", help="any consumer setting "
                         "(Kafka's name), e.g. fetch.max.wait.ms=100")
    consume.add_argument("--consumer.config", dest="command_config", default=None,
                         metavar="FILE", help="consumer settings in a properties file")
    consume.set_defaults(func=cmd_consume, usage_error=consume.error, client_names=CONSUMER)
