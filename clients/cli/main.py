"""The ``minikafka`` command line.

Client commands (``topics``, ``produce``, ``consume``, ``bench``) talk to a broker over
the wire protocol and take ``--bootstrap-server HOST:PORT``, like Kafka's tools; when
it is not given, :func:`resolve_bootstrap` takes the brokers of the local cluster in
``--data-dir`` (its ``cluster.json``, what ``minikafka cluster start`` writes), else
``$MINIKAFKA_BOOTSTRAP``, else the cluster in ``./data`` when that holds one, else
127.0.0.1:9092; a client command's actions (``topics list``) take ``--data-dir`` after
the action too (``_CommandParser``).  Client settings (TLS, SASL logins, tuning) come from
``--command-config FILE`` and ``-X KEY=VALUE`` in Kafka's names
(:mod:`clients.cli.connect.settings`; their ``bootstrap.servers`` counts as given, after
``--bootstrap-server``), and one connection before the command runs says at once when
a listener needs TLS or a login (:mod:`clients.cli.connect.probe`).  Server commands
(``broker``, ``cluster``) run code from the ``broker`` package in a separate
interpreter (``python -m broker ...``): the client package never imports the broker
(DESIGN.md §2), so the CLI crosses that line as a process boundary.

Every command has ``--help``; a failure prints one line ``error: ...`` to stderr and
exits with status 1 (2 for usage errors, as argparse does).  Output piped into a
reader that stops early (``minikafka consume t | head``) ends the command quietly, as
Python's docs recommend for SIGPIPE: stdout is pointed at /dev/null and the exit status
is 1, without a message or a traceback.

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
from pathlib import Path
from typing import Any

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
from clients.cli.common import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, CliError
from clients.cli.connect.probe import check_access
from clients.cli.connect.settings import add_options as add_settings_options
from clients.cli.connect.settings import client_settings
from clients.protocol.errors import MiniKafkaError

DEFAULT_DATA_DIR = "./data"  # ``minikafka cluster``'s default


def _exec_module(module: str, args: Sequence[str]) -> int:
    """Replace this process by ``python -m module args`` (foreground server commands)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", module, *args])
    return 0  # not reached


# -- parser -----------------------------------------------------------------------------


DATA_DIR_HELP = ("a local cluster's directory (minikafka cluster start --data-dir): its "
                 "brokers are the bootstrap servers")


class _CommandParser(argparse.ArgumentParser):
    """A command's parser.  A client command's actions (``topics list``, ``groups
    describe``, ...) also take ``--data-dir`` after the action, as they take
    ``--bootstrap-server``; an action that defines its own ``--data-dir`` wins."""

    client_command = False

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        if not self.client_command:
            return action
        add_parser = action.add_parser

        def add_action_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
            child: argparse.ArgumentParser = add_parser(name, conflict_handler="resolve", **kw)
            child.add_argument("--data-dir", dest="cluster_data_dir", metavar="DIR",
                               default=argparse.SUPPRESS, help=DATA_DIR_HELP)
            add_settings_options(child, suppress=True)
            return child

        setattr(action, "add_parser", add_action_parser)  # noqa: B010 (a method replaced)
        return action


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_CommandParser)

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.client_command = True
        p.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                       help="default: the cluster in --data-dir, else "
                            f"${BOOTSTRAP_ENV}, else ./data's cluster, else {DEFAULT_BOOTSTRAP}")
        p.add_argument("--data-dir", dest="cluster_data_dir", default=None, metavar="DIR",
                       help=DATA_DIR_HELP)
        add_settings_options(p)
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


def resolve_bootstrap(given: str | None, data_dir: str | None) -> str:
    """The address a client command connects to: ``given`` (``--bootstrap-server``),
    else the cluster in ``data_dir``, else ``$MINIKAFKA_BOOTSTRAP``, else the cluster in
    ``./data`` when it has a state file, else ``DEFAULT_BOOTSTRAP``."""
    from clients.workload.faults import bootstrap_from_data_dir

    if given:
        return given
    if data_dir is not None:
        return bootstrap_from_data_dir(data_dir)
    from_env = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if from_env:
        return from_env
    if (Path(DEFAULT_DATA_DIR) / "cluster.json").is_file():
        return bootstrap_from_data_dir(DEFAULT_DATA_DIR)
    return DEFAULT_BOOTSTRAP


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("broker", "cluster"):
        module = "broker" if argv[0] == "broker" else "broker.cluster"
        return _exec_module(module, argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if "cluster_data_dir" in args:
            args.client_settings = client_settings(args)
            from_settings = args.client_settings.pop("bootstrap_servers", None)
            args.bootstrap_server = resolve_bootstrap(args.bootstrap_server or from_settings,
                                                      args.cluster_data_dir)
            check_access(args.bootstrap_server, args.client_settings)
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except (MiniKafkaError, CliError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``| head``): point stdout at /dev/null so the
    interpreter's final flush does not fail again, and exit 1 (Python's docs, "Note on
    SIGPIPE" in the signal module)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 1
