"""The ``minikafka`` command line.

Client commands (``topics``, ``produce``, ``consume``, ``bench``) talk to a broker over
the wire protocol and take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092),
like Kafka's tools.  Server commands (``broker``, ``cluster``) run code from the
``broker`` package in a separate interpreter (``python -m broker ...``): the client
package never imports the broker (DESIGN.md §2), so the CLI crosses that line as a
process boundary.

Every command has ``--help``; a failure prints one line ``error: ...`` to stderr and
exits with status 1 (2 for usage errors, as argparse does).

This module holds the parser and :func:`main` (the ``minikafka`` console script;
``python -m clients.cli`` runs it through :mod:`clients.cli.__main__`).  Every command
lives in its own module (:mod:`clients.cli.topics`, :mod:`~clients.cli.produce`,
:mod:`~clients.cli.consume`, :mod:`~clients.cli.bench`, :mod:`~clients.cli.demo`,
:mod:`~clients.cli.groups`, :mod:`~clients.cli.workload`), each adding its subparser;
what they share (``CliError``, ``DEFAULT_BOOTSTRAP``) is :mod:`clients.cli.common`, so
no command module imports this one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from clients.cli import (
    bench,
    consume,
    demo,
    groups,
    leader_election,
    produce,
    topics,
    workload,
)
from clients.cli.admin_tools import configs, delete_records, get_offsets, log_dirs
from clients.cli.common import DEFAULT_BOOTSTRAP, CliError
from clients.protocol.errors import MiniKafkaError


def _exec_module(module: str, args: Sequence[str]) -> int:
    """Replace this process by ``python -m module args`` (foreground server commands)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *args])
    return 0  # not reached


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

    topics.add_parser(sub, client)
    produce.add_parser(sub, client)
    consume.add_parser(sub, client)
    bench.add_parser(sub, client)
    demo.add_parser(sub)
    groups.add_parser(sub, client)
    leader_election.add_parser(sub, client)
    workload.add_parsers(sub)
    configs.add_parser(sub, client)
    get_offsets.add_parser(sub, client)
    delete_records.add_parser(sub, client)
    log_dirs.add_parser(sub, client)
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
