"""``groups --reset-offsets``: the plan of new committed offsets for a group, as Kafka's
``kafka-consumer-groups.sh`` computes it, and its execution.

Which partitions: ``--topic T`` (every partition of T) or ``--topic T:0,2`` (those), may
be repeated; ``--all-topics``: every partition the group has a committed offset for.
Where to (exactly one): ``--to-earliest`` (log start offset), ``--to-latest`` (high
watermark), ``--to-datetime 2026-11-29T10:00:00.000`` (the first record stamped at or
after it; ISO 8601, UTC unless it names an offset such as ``+01:00``; the high watermark
when no record is that late), ``--to-offset N`` and ``--shift-by N`` (the current
committed offset plus N; a partition without one starts from its log start offset),
both clamped into [log start, high watermark] as Kafka does.

``--dry-run`` (also what happens without ``--execute``, with a warning, as in Kafka)
prints the plan; ``--execute`` commits it, only when the group is inactive (Empty, or
unknown: Kafka's rule, checked here by DescribeGroups before and by the coordinator at
commit, which refuses a simple commit to a group with members).

Costs: Metadata (topics), OffsetFetch, ListOffsets for earliest and latest (and by time),
DescribeGroups and OffsetCommit for ``--execute``.  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from clients.admin.offsets import EARLIEST, LATEST
from clients.cli.common import CliError
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndTimestamp

__all__ = ["add_reset_options", "plan", "reset_offsets", "topic_partitions"]

TARGETS = ("to_earliest", "to_latest", "to_datetime", "to_offset", "shift_by")
INACTIVE = ("Empty", "Dead")


def add_reset_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all-topics", action="store_true",
                   help="reset-offsets: every partition the group has committed")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss")
    p.add_argument("--to-offset", type=int, default=None, metavar="N")
    p.add_argument("--shift-by", type=int, default=None, metavar="N")
    p.add_argument("--dry-run", action="store_true", help="print the plan (the default)")
    p.add_argument("--execute", action="store_true", help="commit the plan")


def _datetime_ms(text: str) -> int:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime: {text!r} is not "
                       "YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM]") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def topic_partitions(admin: Any, specs: list[str]) -> list[TopicPartition]:
    """The partitions of ``--topic`` specs: ``T`` (every partition of T) or ``T:0,2``."""
    out: set[TopicPartition] = set()
    for spec in specs:
        name, _, parts = spec.partition(":")
        if parts:
            try:
                out.update(TopicPartition(name, int(p)) for p in parts.split(","))
            except ValueError:
                raise CliError(f"--topic {spec!r}: partitions must be numbers (T:0,1)") from None
        else:
            out.update(TopicPartition(name, p.partition)
                       for p in admin.describe_topics([name])[name].partitions)
    return sorted(out)


def _partitions(admin: Any, args: argparse.Namespace,
                committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if args.all_topics == bool(args.topic):
        raise CliError("reset-offsets: give --topic T[:P,...] or --all-topics (one of them)")
    if args.all_topics:
        return sorted(committed)
    return topic_partitions(admin, args.topic)


def plan(admin: Any, group: str, args: argparse.Namespace) -> dict[TopicPartition, int]:
    """The new offset of each chosen partition."""
    chosen = [t for t in TARGETS  # `is`: --to-offset 0 and --shift-by 0 are chosen too
              if getattr(args, t) is not None and getattr(args, t) is not False]
    if len(chosen) != 1:
        raise CliError("reset-offsets: give exactly one of --to-earliest, --to-latest, "
                       "--to-datetime, --to-offset, --shift-by")
    committed = {tp: o.offset for tp, o in admin.list_group_offsets(group).items()
                 if o.offset >= 0}
    partitions = _partitions(admin, args, committed)
    if not partitions:
        return {}

    def offsets(spec: int) -> dict[TopicPartition, int]:
        found: dict[TopicPartition, OffsetAndTimestamp] = admin.list_offsets(
            {tp: spec for tp in partitions})
        return {tp: o.offset for tp, o in found.items()}

    earliest, latest = offsets(EARLIEST), offsets(LATEST)
    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_datetime is not None:
        by_time = offsets(_datetime_ms(args.to_datetime))
        return {tp: latest[tp] if o < 0 else o for tp, o in by_time.items()}
    if args.to_offset is not None:
        wanted = {tp: args.to_offset for tp in partitions}
    else:
        wanted = {tp: committed.get(tp, earliest[tp]) + args.shift_by for tp in partitions}
    return {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in wanted.items()}


def reset_offsets(admin: Any, group: str, args: argparse.Namespace) -> None:
    """Print the plan for ``group``; commit it with ``--execute``."""
    if args.execute and args.dry_run:
        raise CliError("reset-offsets: --dry-run and --execute exclude each other")
    if args.execute:
        state = admin.describe_groups([group])[group].state
        if state not in INACTIVE:
            raise CliError(f"assignments can only be reset if the group {group!r} is "
                           f"inactive, but the current state is {state}")
    new = plan(admin, group, args)
    if args.execute:
        admin.alter_group_offsets(group, new)
    elif not args.dry_run:
        print("WARN: no action is performed without --execute (this is a dry run)",
              file=sys.stderr)
    rows = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    rows += [(group, tp.topic, str(tp.partition), str(o)) for tp, o in sorted(new.items())]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
