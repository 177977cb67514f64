"""CLI for consumer groups: ``groups list`` and ``groups describe GROUP``
(``consume --group`` is :mod:`clients.cli.consume`).

``groups describe`` prints Kafka's kafka-consumer-groups columns::

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  CLIENT-ID

where LOG-END-OFFSET is the high watermark and ``-`` stands for "nothing committed",
after a header line with the state, assignor, coordinator and member count.

Costs: one Admin round trip per broker (list) or 3-4 per group (describe).  Thread
safety: a command runs in one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["add_parser"]


def cmd_groups(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    with Admin(args.bootstrap_server) as admin:
        if args.groups_command == "list":
            listings = admin.list_groups()
            print(f"{'GROUP':<30} {'STATE':<20} PROTOCOL-TYPE")
            for g in listings:
                print(f"{g.group_id:<30} {g.state:<20} {g.protocol_type or '-'}")
            return 0
        desc = admin.describe_groups([args.group])[args.group]
        offsets = admin.list_group_offsets(args.group)
    owner = {tp: m for m in desc.members for tp in m.assignment}
    print(f"Group: {desc.group_id}\tState: {desc.state}\tProtocol: {desc.protocol or '-'}\t"
          f"Coordinator: {desc.coordinator}\tMembers: {len(desc.members)}")
    for m in desc.members:
        parts = ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
        print(f"Member: {m.member_id}\tInstance: {m.group_instance_id or '-'}\t"
              f"Client: {m.client_id}\tHost: {m.client_host}\tPartitions: {parts}")
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "CLIENT-ID")
    rows = [header]
    for tp in sorted(set(offsets) | set(owner)):
        o = offsets.get(tp)
        member = owner.get(tp)
        lag = None if o is None else o.lag
        rows.append((desc.group_id, tp.topic, str(tp.partition),
                     "-" if o is None or o.offset < 0 else str(o.offset),
                     "-" if o is None or o.high_watermark < 0 else str(o.high_watermark),
                     "-" if lag is None else str(lag),
                     member.member_id if member else "-",
                     member.client_id if member else "-"))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """Register ``groups``."""
    groups = client("groups", "list and describe consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    listing = gsub.add_parser("list", help="list groups with their state")
    describe = gsub.add_parser("describe", help="members, assignment, offsets and lag")
    describe.add_argument("group")
    for p in (listing, describe):
        p.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
    groups.set_defaults(func=cmd_groups)
