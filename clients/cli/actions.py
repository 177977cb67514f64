"""How a command's actions are spelled: as a subcommand (``topics describe``) or as
Kafka's action flag (``topics --describe``, as ``kafka-topics.sh`` takes it).

:func:`add_actions` gives a command parser both spellings of each action: a
subcommand with the command's options (and the action's positional argument, if it
has one), and a flag ``--ACTION`` on the command itself, whose options are the same
(added once more to the command parser).  :func:`action_of` names the action that was
chosen, or raises :class:`~clients.cli.common.CliError` when none or two were.

Both spellings fill the same ``argparse.Namespace`` fields, so a command module reads
one set of options whichever the user typed.  (An option typed before a subcommand is
replaced by the subcommand's default: argparse copies the subcommand's namespace over
the command's.)

Costs: parser construction only.  Thread-safety: build the parser in one thread.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from clients.cli.common import CliError

__all__ = ["Action", "action_of", "add_actions", "named"]

# (name, help, the metavar of its positional argument or None, its help); the positional
# argument's value is ``args.name``
Action = tuple[str, str, str | None, str]


def add_actions(
    parser: argparse.ArgumentParser,
    actions: Sequence[Action],
    options: Callable[[argparse.ArgumentParser], None],
) -> dict[str, argparse.ArgumentParser]:
    """Add each action as a subcommand and as a ``--name`` flag; ``options(p)`` adds the
    command's options to ``p`` (called for the command parser and every subcommand).
    Returns the subcommand parsers by action name."""
    flags = parser.add_mutually_exclusive_group()
    for name, help_text, _, _ in actions:
        flags.add_argument(f"--{name}", dest="action_flag", action="store_const", const=name,
                           help=help_text)
    options(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    parsers = {}
    for name, help_text, positional, positional_help in actions:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if positional is not None:
            p.add_argument("name", nargs="?", default=None, metavar=positional,
                           help=positional_help)
        p.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
        options(p)
        parsers[name] = p
    return parsers


def action_of(args: argparse.Namespace, command: str, actions: Sequence[Action]) -> str:
    """The action chosen by subcommand or flag (CliError if none, or two that differ)."""
    chosen = {a for a in (getattr(args, "action", None), getattr(args, "action_flag", None))
              if a is not None}
    names = ", ".join(a[0] for a in actions)
    if not chosen:
        raise CliError(f"{command}: name an action ({names}) as a subcommand or --ACTION")
    if len(chosen) > 1:
        raise CliError(f"{command}: one action at a time, got {' and '.join(sorted(chosen))}")
    return chosen.pop()


def named(args: argparse.Namespace, option: str, what: str) -> str:
    """The name given positionally or by Kafka's option (``--topic``, ``--group``);
    CliError if neither or two different ones."""
    values = {v for v in (getattr(args, "name", None), getattr(args, option, None))
              if v is not None}
    if not values:
        raise CliError(f"name the {what} (--{option})")
    if len(values) > 1:
        raise CliError(f"two {what} names given: {', '.join(sorted(values))}")
    return values.pop()
