"""How ``minikafka consume`` prints a record (no cluster: the printer is pure)."""

from __future__ import annotations

import json

import pytest

from clients.cli.common import CliError
from clients.cli.record_format import RecordPrinter
from clients.types import ConsumerRecord

FULL = ConsumerRecord("t", 2, 7, 1700000000000, b"k", b"v\xff", (("a", b"1"), ("b", None)))
NULLS = ConsumerRecord("t", 0, 0, 5, None, None)
EMPTY = ConsumerRecord("t", 0, 1, 5, b"", b"")


def test_format_codes_escapes_and_nulls() -> None:
    fmt = RecordPrinter(fmt=r"%t/%p/%o/%T %k=%s [%h] %K %S 100%%\t|\n")
    assert fmt(FULL) == "t/2/7/1700000000000 k=v\ufffd [a=1,b=null] 1 2 100%\t|\n"
    assert fmt(NULLS) == "t/0/0/5 null=null [] -1 -1 100%\t|\n"
    assert fmt(EMPTY) == "t/0/1/5 = [] 0 0 100%\t|\n"
    assert RecordPrinter(fmt="%k:%s", null_literal="NULL")(NULLS) == "NULL:NULL"


def test_plain_output_is_kafkas_console_consumer() -> None:
    assert RecordPrinter()(FULL) == "v\ufffd\n"
    assert RecordPrinter(print_key=True)(NULLS) == "null\tnull\n"
    assert RecordPrinter(print_key=True)(EMPTY) == "\t\n"


def test_json_tells_null_from_empty() -> None:
    as_json = RecordPrinter(as_json=True)
    assert json.loads(as_json(NULLS))["key"] is None
    assert json.loads(as_json(EMPTY))["value"] == ""
    full = json.loads(as_json(FULL))
    assert full["headers"] == [{"key": "a", "value": "1"}, {"key": "b", "value": None}]
    assert (full["partition"], full["offset"], full["timestamp"]) == (2, 7, 1700000000000)


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"fmt": "%x"}, "unknown code %x"),
    ({"fmt": "100%"}, "unknown code %"),
    ({"fmt": "%s", "as_json": True}, "exclude each other"),
])
def test_bad_formats_are_refused(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(CliError, match=says):
        RecordPrinter(**kwargs)  # type: ignore[arg-type]
