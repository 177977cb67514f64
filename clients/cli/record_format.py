"""How ``minikafka consume`` prints a record: plain lines, a kcat-like format string, or
JSON lines.

- plain (the default, Kafka's console consumer): the value, after the key and a tab
  with ``--print-key``; a null key or value prints as ``--null-literal`` (``null``, as
  Kafka's ``null.literal``), an empty one as nothing.
- ``--format FMT`` (kcat's ``-f``): ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%T``
  timestamp (ms), ``%k`` key, ``%s`` value, ``%h`` headers (``k1=v1,k2=v2``), ``%K`` /
  ``%S`` key / value length in bytes (-1 for null), ``%%`` a percent sign; ``\\n``,
  ``\\t`` and ``\\\\`` are escapes.  As in kcat, no newline is added: end FMT with ``\\n``.
- ``--json``: one JSON object per record: ``topic``, ``partition``, ``offset``,
  ``timestamp``, ``key``, ``value`` (JSON ``null`` for null, ``""`` for empty) and
  ``headers`` (a list of ``{"key": ..., "value": ...}``, in record order; duplicates
  kept).

Bytes are decoded as UTF-8 with replacement characters.  A format string is parsed once
(:func:`parse_format` raises :class:`~clients.cli.common.CliError` for an unknown
``%`` code); formatting a record is O(its size).  Pure functions: no I/O, no state.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from clients.cli.common import CliError
from clients.types import ConsumerRecord, Header

__all__ = ["RecordPrinter", "parse_format"]

_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "r": "\r"}
_CODES = "tpoTksKSh%"


def _text(data: bytes | None, null: str) -> str:
    return null if data is None else data.decode(errors="replace")


def _headers(headers: tuple[Header, ...], null: str) -> str:
    return ",".join(f"{k}={_text(v, null)}" for k, v in headers)


def parse_format(fmt: str) -> list[tuple[bool, str]]:
    """``fmt`` -> pieces: (True, code letter) for a ``%`` code, (False, literal text)."""
    pieces: list[tuple[bool, str]] = []
    literal: list[str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        nxt = fmt[i + 1] if i + 1 < len(fmt) else ""
        if c == "\\" and nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
            i += 2
        elif c == "%":
            if nxt not in _CODES or not nxt:
                raise CliError(f"--format: unknown code %{nxt} (known: "
                               + " ".join("%" + k for k in _CODES) + ")")
            if nxt == "%":
                literal.append("%")
            else:
                if literal:
                    pieces.append((False, "".join(literal)))
                    literal = []
                pieces.append((True, nxt))
            i += 2
        else:
            literal.append(c)
            i += 1
    if literal:
        pieces.append((False, "".join(literal)))
    return pieces


class RecordPrinter:
    """Turns a record into the text to write (see the module docstring)."""

    def __init__(self, *, fmt: str | None = None, as_json: bool = False,
                 print_key: bool = False, null_literal: str = "null") -> None:
        if fmt is not None and as_json:
            raise CliError("--format and --json exclude each other")
        self.null = null_literal
        self._render: Callable[[ConsumerRecord], str]
        if as_json:
            self._render = self._json
        elif fmt is not None:
            pieces = parse_format(fmt)
            self._render = lambda r: "".join(self._code(r, text) if code else text
                                             for code, text in pieces)
        else:
            self._print_key = print_key
            self._render = self._plain

    def __call__(self, record: ConsumerRecord) -> str:
        return self._render(record)

    def _plain(self, r: ConsumerRecord) -> str:
        value = _text(r.value, self.null)
        return (f"{_text(r.key, self.null)}\t{value}\n" if self._print_key
                else value + "\n")

    def _code(self, r: ConsumerRecord, code: str) -> str:
        if code == "t":
            return str(r.topic)
        if code == "p":
            return str(r.partition)
        if code == "o":
            return str(r.offset)
        if code == "T":
            return str(r.timestamp)
        if code == "k":
            return _text(r.key, self.null)
        if code == "s":
            return _text(r.value, self.null)
        if code == "K":
            return str(-1 if r.key is None else len(r.key))
        if code == "S":
            return str(-1 if r.value is None else len(r.value))
        return _headers(r.headers, self.null)  # "h"

    def _json(self, r: ConsumerRecord) -> str:
        def text(data: bytes | None) -> str | None:
            return None if data is None else data.decode(errors="replace")

        return json.dumps({
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp": r.timestamp, "key": text(r.key), "value": text(r.value),
            "headers": [{"key": k, "value": text(v)} for k, v in r.headers],
        }) + "\n"  # fmt: skip
