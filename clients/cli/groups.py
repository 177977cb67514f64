"""CLI for consumer groups (``kafka-consumer-groups.sh``'s verbs; ``consume --group``
is :mod:`clients.cli.consume`).

Actions, as subcommands or Kafka's flags (:mod:`clients.cli.actions`), groups named
positionally, by ``--group`` (repeatable) or ``--all-groups``:

- ``list`` (``--state STATE[,STATE]``: only groups in those states, any case; an unknown
  state name is an error);
- ``describe``: offsets and lag (below), ``--members`` (one row per member with its
  partitions) or ``--state`` (coordinator, assignor, state, member count); a group the
  coordinator does not know (Dead, no members, no offsets) is the error
  ``GROUP_ID_NOT_FOUND ... not found``, exit 1;
- ``delete`` (DeleteGroups: only groups without members);
- ``delete-offsets --topic T[:P,...]`` (OffsetDelete; of a group with members only the
  offsets of topics they do not subscribe to, GROUP_SUBSCRIBED_TO_TOPIC for the others,
  Kafka's rule; GROUP_ID_NOT_FOUND for an unknown group);
- ``reset-offsets`` (:mod:`clients.cli.admin_tools.reset_offsets`).

``groups describe`` prints Kafka's kafka-consumer-groups columns::

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  CLIENT-ID

where LOG-END-OFFSET is the high watermark and ``-`` stands for "nothing committed",
after a header line with the state, assignor, coordinator and member count.

Costs: one Admin round trip per broker (list) or 3-4 per group (describe).  Thread
safety: a command runs in one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from clients.cli.actions import Action, action_of, add_actions
from clients.cli.admin_tools.reset_offsets import (
    add_reset_options,
    reset_offsets,
    topic_partitions,
)
from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings

__all__ = ["add_parser"]


# the classic protocol's group states (Kafka's ConsumerGroupState names)
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
ACTIONS: tuple[Action, ...] = (
    ("list", "list groups with their state", None, ""),
    ("describe", "offsets and lag (default), --members or --state", "GROUP", "the group"),
    ("delete", "delete empty groups and their offsets", "GROUP", "the group"),
    ("delete-offsets", "delete a group's committed offsets of --topic T[:P,...]",
     "GROUP", "the group"),
    ("reset-offsets", "plan (--dry-run) or commit (--execute) new offsets of an inactive "
     "group", "GROUP", "the group"),
)


def _groups(admin: Any, args: argparse.Namespace) -> list[str]:
    """The groups named (positionally, by --group, or --all-groups)."""
    named = ([args.name] if getattr(args, "name", None) else []) + list(args.group or [])
    if args.all_groups:
        if named:
            raise CliError("--all-groups and named groups exclude each other")
        return [g.group_id for g in admin.list_groups()]
    if not named:
        raise CliError("name a group (--group G) or give --all-groups")
    return list(dict.fromkeys(named))


def _print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _describe(admin: Any, group: str, args: argparse.Namespace) -> None:
    desc = admin.describe_groups([group])[group]
    offsets = admin.list_group_offsets(group)
    if desc.state == "Dead" and not desc.members and not offsets:
        raise CliError(f"GROUP_ID_NOT_FOUND: group {group!r} not found")
    if args.state is not None:
        _print_table([("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                      (group, str(desc.coordinator), desc.protocol or "-", desc.state,
                       str(len(desc.members)))])
        return
    if args.members:  # a KIP-848 group's members also show their epoch
        epochs = desc.group_type == "consumer"
        rows: list[tuple[str, ...]] = [
            ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT")
            + (("MEMBER-EPOCH",) if epochs else ())]
        rows += [(group, m.member_id, m.client_host or "-", m.client_id,
                  str(len(m.assignment)),
                  ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-")
                 + ((str(m.member_epoch),) if epochs else ())
                 for m in desc.members]  # fmt: skip
        _print_table(rows)
        return
    owner = {tp: m for m in desc.members for tp in m.assignment}
    epoch = f"\tEpoch: {desc.group_epoch}" if desc.group_type == "consumer" else ""
    print(f"Group: {desc.group_id}\tState: {desc.state}\tProtocol: {desc.protocol or '-'}\t"
          f"Coordinator: {desc.coordinator}\tMembers: {len(desc.members)}\t"
          f"Type: {desc.group_type}{epoch}")
    for m in desc.members:
        parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
        print(f"Member: {m.member_id}\tInstance: {m.group_instance_id or '-'}\t"
              f"Client: {m.client_id}\tHost: {m.client_host}\tPartitions: {parts}")
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "CLIENT-ID")
    table: list[tuple[str, ...]] = [header]
    for tp in sorted(set(offsets) | set(owner)):
        o = offsets.get(tp)
        member = owner.get(tp)
        lag = None if o is None else o.lag
        table.append((desc.group_id, tp.topic, str(tp.partition),
                     "-" if o is None or o.offset < 0 else str(o.offset),
                     "-" if o is None or o.high_watermark < 0 else str(o.high_watermark),
                     "-" if lag is None else str(lag),
                     member.member_id if member else "-",
                     member.client_id if member else "-"))  # fmt: skip
    _print_table(table)


def parse_states(text: str) -> list[str]:
    """``--state stable,empty`` -> ``["Stable", "Empty"]`` (Kafka's tool: a comma list,
    any case); a name that is no group state is an error, not an empty list."""
    known = {s.lower(): s for s in GROUP_STATES}
    out = []
    for name in filter(None, (n.strip() for n in text.split(","))):
        if name.lower() not in known:
            raise CliError(f"--state: {name!r} is not a group state "
                           f"({', '.join(GROUP_STATES)})")
        out.append(known[name.lower()])
    return out


GROUP_TYPES = ("classic", "consumer")


def parse_types(text: str) -> list[str]:
    """``--type classic,consumer`` (any case), checked against Kafka's group types."""
    out = []
    for name in filter(None, (n.strip().lower() for n in text.split(","))):
        if name not in GROUP_TYPES:
            raise CliError(f"--type: {name!r} is not a group type ({', '.join(GROUP_TYPES)})")
        out.append(name)
    return out


def cmd_groups(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    action = action_of(args, "groups", ACTIONS)
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        if action == "list":
            listings = admin.list_groups(states=parse_states(args.state) if args.state else None,
                                         types=parse_types(args.type) if args.type else None)
            print(f"{'GROUP':<30} {'STATE':<20} {'TYPE':<10} PROTOCOL-TYPE")
            for listing in listings:
                print(f"{listing.group_id:<30} {listing.state:<20} "
                      f"{listing.group_type or '-':<10} {listing.protocol_type or '-'}")
            return 0
        groups = _groups(admin, args)
        if action == "describe":
            for i, group in enumerate(groups):
                if i:
                    print()
                _describe(admin, group, args)
        elif action == "delete":
            failed = {g: e for g, e in admin.delete_groups(groups, raise_on_error=False).items()
                      if e is not None}
            for g in groups:
                if g not in failed:
                    print(f"Deleted group {g}.")
            if failed:
                raise CliError("; ".join(str(e) for e in failed.values()))  # each names its group
        elif action == "delete-offsets":
            if not args.topic:
                raise CliError("delete-offsets: name the partitions (--topic T[:P,...])")
            wanted = topic_partitions(admin, args.topic)
            for group in groups:
                refused = {tp: e for tp, e in admin.delete_group_offsets(
                    group, wanted, raise_on_error=False).items() if e is not None}
                for tp in wanted:
                    if tp not in refused:
                        print(f"Deleted the offset of {tp.topic}-{tp.partition} for group "
                              f"{group}.")
                if refused:
                    raise CliError("; ".join(str(e) for e in refused.values()))
        else:  # reset-offsets
            for group in groups:
                reset_offsets(admin, group, args)
    return 0


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", action="append", default=None, metavar="GROUP",
                   help="a group (repeatable; Kafka's flag)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    p.add_argument("--offsets", action="store_true",
                   help="describe: offsets and lag (the default view; Kafka's flag)")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE",
                   help="describe: state and member count; list: only groups in STATE "
                        "(Stable, Empty, ...)")
    p.add_argument("--type", default=None, metavar="TYPE[,TYPE]",
                   help="list: only groups of these types (classic, consumer)")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,...]",
                   help="reset-offsets, delete-offsets: a topic, or some of its partitions")
    add_reset_options(p)


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Register ``groups``."""
    groups = client("groups", "list, describe, delete consumer groups and reset their offsets")
    add_actions(groups, ACTIONS, _options)
    groups.set_defaults(func=cmd_groups)
