"""The schema interpreted: a slow, plain walker that knows where it is.

Two uses: it is the oracle the compiled codec (:mod:`clients.protocol.compiler`) is tested
against (same bytes, same values), and when the compiled code fails on bad input the
codec asks it for the precise reason and field path, e.g. ``topics[0].partitions[1].index:
expected int32, got str`` or ``topics[2].name: string of 70 bytes runs past the end``.

Decoding returns the same values as the compiled decoder (records as slices of the
input); encoding returns ``bytes`` (records copied in).  :class:`FieldError` carries the
reason and the path.

Costs: a Python call per value, a path string per error only.  Thread/process safety:
pure functions.
"""

from __future__ import annotations

import copy
import struct
from typing import Any

from clients.protocol.compiler import WireError, read_uvarint, records_length, uvarint
from clients.protocol.schema import (
    BYTES,
    RECORDS,
    STRING,
    Array,
    Field,
    Fixed,
    Struct,
    Type,
    Variable,
)


class FieldError(Exception):
    """A value does not match its schema at ``path`` (outermost first)."""

    def __init__(self, reason: str, path: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path

    def where(self) -> str:
        out = ""
        for part in self.path:
            out += part if part.startswith("[") or not out else "." + part
        return out or "<body>"

    def __str__(self) -> str:
        return f"{self.where()}: {self.reason}"


def describe(value: object) -> str:
    """Short description of a wrong value (never its content)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return f"int {value}" if -(10**20) < value < 10**20 else "huge int"
    return type(value).__name__


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: Any, pos: int) -> None:
        self.buf = buf
        self.pos = pos


def decode(st: Struct, version: int, flexible: bool, buf: Any, pos: int = 0,
           end: int | None = None) -> tuple[dict[str, Any], int]:
    """Decode one struct; raises :class:`FieldError` with the path of the first fault."""
    cur = _Cursor(buf, pos)
    value = _decode_struct(st, version, flexible, cur, len(buf) if end is None else end, [])
    return value, cur.pos


def _fail(path: list[str], reason: str) -> FieldError:
    return FieldError(reason, list(path))


def _read_fixed(t: Fixed, cur: _Cursor, end: int, path: list[str]) -> Any:
    if cur.pos + t.size > end:
        raise _fail(path, f"{t.name} runs past the end (at byte {cur.pos})")
    (value,) = struct.unpack_from(">" + t.fmt, cur.buf, cur.pos)
    cur.pos += t.size
    return value


def _read_length(flexible: bool, classic: Fixed, cur: _Cursor, end: int,
                 path: list[str]) -> int:
    if flexible:
        try:
            n, cur.pos = read_uvarint(cur.buf, cur.pos)
        except (IndexError, WireError) as e:
            raise _fail(path, f"bad unsigned varint length ({e or 'truncated'})") from None
        return n - 1
    value: int = _read_fixed(classic, cur, end, path)
    return value


_I16 = Fixed("int16", "h", 2)
_I32 = Fixed("int32", "i", 4)


def _decode_value(t: Type, version: int, flexible: bool, nullable: bool, cur: _Cursor, end: int,
                  path: list[str]) -> Any:
    if isinstance(t, Fixed):
        return _read_fixed(t, cur, end, path)
    if isinstance(t, Struct):
        if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
            if cur.pos + 1 > end:
                raise _fail(path, f"struct marker runs past the end (at byte {cur.pos})")
            marker = struct.unpack_from(">b", cur.buf, cur.pos)[0]
            cur.pos += 1
            if marker < 0:
                return None
        return _decode_struct(t, version, flexible, cur, end, path)
    n = _read_length(flexible, _I16 if t is STRING else _I32, cur, end, path)
    if n < 0:
        if n == -1 and nullable:
            return None
        raise _fail(path, f"null or negative length {n} where {t.name} is not nullable"
                    if n == -1 else f"negative length {n}")
    if isinstance(t, Variable):
        if cur.pos + n > end:
            raise _fail(path, f"{t.name} of {n} bytes runs past the end (at byte {cur.pos})")
        raw = cur.buf[cur.pos : cur.pos + n]
        cur.pos += n
        if t is STRING:
            try:
                return str(raw, "utf-8")
            except UnicodeDecodeError as e:
                raise _fail(path, f"string is not UTF-8 ({e.reason})") from None
        return raw if t is RECORDS else bytes(raw)
    assert isinstance(t, Array)
    if n > end - cur.pos:
        raise _fail(path, f"array of {n} items runs past the end (at byte {cur.pos})")
    items = []
    for i in range(n):
        path.append(f"[{i}]")
        items.append(_decode_value(t.element, version, flexible, False, cur, end, path))
        path.pop()
    return items


def _decode_struct(st: Struct, version: int, flexible: bool, cur: _Cursor, end: int,
                   path: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged: dict[int, Field] = {}
    for f in st.fields:
        if version not in f.versions:
            out[f.name] = copy.deepcopy(f.default)
            continue
        if flexible and f.is_tagged(version):
            assert f.tag is not None
            tagged[f.tag] = f
            out[f.name] = copy.deepcopy(f.default)
            continue
        path.append(f.name)
        out[f.name] = _decode_value(f.type, version, flexible, f.is_nullable(version), cur, end,
                                    path)
        path.pop()
    if flexible:
        path.append("<tagged fields>")
        count = _read_length(True, _I32, cur, end, path) + 1
        for _ in range(count):
            tag = _read_length(True, _I32, cur, end, path) + 1
            size = _read_length(True, _I32, cur, end, path) + 1
            tag_end = cur.pos + size
            if tag_end > end:
                raise _fail(path, f"tagged field {tag} of {size} bytes runs past the end")
            tf = tagged.get(tag)
            if tf is not None:
                path.append(tf.name)
                out[tf.name] = _decode_value(tf.type, version, True, tf.is_nullable(version),
                                             cur, tag_end, path)
                path.pop()
            cur.pos = tag_end
        path.pop()
    return out


def encode(st: Struct, version: int, flexible: bool, value: Any) -> bytes:
    """Encode one struct; raises :class:`FieldError` with the path of the first bad value."""
    out = bytearray()
    _encode_struct(st, version, flexible, value, out, [])
    return bytes(out)


def _put_length(flexible: bool, classic: str, n: int, out: bytearray) -> None:
    out += uvarint(n + 1) if flexible else struct.pack(classic, n)


def _encode_value(t: Type, version: int, flexible: bool, nullable: bool, value: Any,
                  out: bytearray, path: list[str]) -> None:
    if isinstance(t, Fixed):
        if t.name == "uuid":
            ok = type(value) is bytes and len(value) == 16
        elif t.name == "float64":
            ok = type(value) in (int, float)
        elif t.name == "bool":
            ok = type(value) is bool
        else:
            ok = type(value) is int and t.low <= value <= t.high
        if not ok:
            raise _fail(path, f"expected {t.name}, got {describe(value)}")
        out += struct.pack(">" + t.fmt, value)
        return
    if isinstance(t, Struct):
        if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
            out += b"\xff" if value is None else b"\x01"
            if value is None:
                return
        _encode_struct(t, version, flexible, value, out, path)
        return
    if value is None:
        if not nullable:
            raise _fail(path, f"{t.name} is not nullable in v{version}")
        out += b"\x00" if flexible else struct.pack(">h" if t is STRING else ">i", -1)
        return
    if t is STRING:
        if type(value) is not str:
            raise _fail(path, f"expected string, got {describe(value)}")
        raw = value.encode()
        if len(raw) > 32767:
            raise _fail(path, f"string of {len(raw)} bytes exceeds 32767")
        _put_length(flexible, ">h", len(raw), out)
        out += raw
    elif t is BYTES or t is RECORDS:
        if t is BYTES and type(value) not in (bytes, bytearray, memoryview):
            raise _fail(path, f"expected bytes, got {describe(value)}")
        try:
            n = records_length(value)
            raw = bytes(value)
        except TypeError:
            raise _fail(path, f"expected bytes-like records, got {describe(value)}") from None
        _put_length(flexible, ">i", n, out)
        out += raw
    else:
        assert isinstance(t, Array)
        if type(value) not in (list, tuple):
            raise _fail(path, f"expected array, got {describe(value)}")
        _put_length(flexible, ">i", len(value), out)
        for i, item in enumerate(value):
            path.append(f"[{i}]")
            _encode_value(t.element, version, flexible, False, item, out, path)
            path.pop()


def _encode_struct(st: Struct, version: int, flexible: bool, value: Any, out: bytearray,
                   path: list[str]) -> None:
    if not isinstance(value, dict):
        raise _fail(path, f"expected struct (dict), got {describe(value)}")
    tagged: list[tuple[int, bytes]] = []
    for f in st.fields_at(version):
        x = value.get(f.name, f.default)
        path.append(f.name)
        if flexible and f.is_tagged(version):
            if x != f.default:
                assert f.tag is not None
                data = bytearray()
                _encode_value(f.type, version, True, f.is_nullable(version), x, data, path)
                tagged.append((f.tag, bytes(data)))
        else:
            _encode_value(f.type, version, flexible, f.is_nullable(version), x, out, path)
        path.pop()
    if flexible:
        out += uvarint(len(tagged))
        for tag, payload in sorted(tagged):
            out += uvarint(tag) + uvarint(len(payload)) + payload
