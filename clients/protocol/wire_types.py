"""Wire types of the schema language (:mod:`clients.protocol.schema`), each compiled to a checker.

Types and their wire (msgpack) form (``Struct`` is declared in :mod:`clients.protocol.schema`):

| type                 | Python value (decoded)        | msgpack form                          |
|----------------------|-------------------------------|---------------------------------------|
| Int8/16/32/64        | int, range-checked            | int (bool is rejected)                |
| Bool                 | bool                          | true/false                            |
| Str, NullableStr     | str (max_length in chars)     | str (utf-8) / nil                     |
| Bytes, NullableBytes | bytes                         | bin / nil                             |
| Records              | memoryview into the frame     | int = byte length; bytes in the tail  |
| Array(of)            | list (or None if nullable)    | array                                 |
| Map(key, value)      | dict                          | map                                   |
| Struct(**fields)     | dict keyed by field name      | map keyed by field name (str)         |

Each type's ``compile(version, encode)`` returns a checker ``(value, context) -> value``
that validates (and on encode converts) one value, raising :class:`FieldError` with the
reason; containers add the path of the bad item while the error unwinds.  Records
values are not put in msgpack: the encoder replaces each by its length and collects the
value (bytes-like, or any object with an int ``length`` such as a file region); the
decoder replaces each length by a zero-copy slice of the frame's tail (:class:`Tail`).
Structs (named fields, versions, defaults) are in :mod:`clients.protocol.schema`.

Costs: compiling is O(type nodes); a compiled checker costs one closure call per value
(O(items) for containers) and builds error paths only when raising.  Thread/process
safety: types and compiled checkers are immutable after construction and may be shared
freely; every call keeps its state on the stack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# A compiled checker: (value, context) -> converted value.  The context is the list of
# collected Records values when encoding, and a _Tail cursor when decoding.
Check = Callable[[Any, Any], Any]


class FieldError(Exception):
    """A value does not match its schema; ``path`` is innermost-first while unwinding."""

    def __init__(self, reason: str, path: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = path if path is not None else []

    def where(self) -> str:
        out = ""
        for part in reversed(self.path):
            out += part if part.startswith("[") or not out else "." + part
        return out or "<body>"


def describe(value: object) -> str:
    """Short description of a wrong value for error messages (never its full content)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return f"int {value}" if -(10**20) < value < 10**20 else "huge int"
    return type(value).__name__


class Tail:
    """Decode cursor over the raw tail of a frame (Records bytes, consumed in order)."""

    __slots__ = ("pos", "view")

    def __init__(self, view: memoryview) -> None:
        self.view = view
        self.pos = 0


class Type:
    """A wire type; ``compile(version, encode)`` returns its checker."""

    label = "value"

    def compile(self, version: int, encode: bool) -> Check:
        raise NotImplementedError

    def has_records(self) -> bool:
        return False


TypeLike = Type | type[Type]


def as_type(t: TypeLike) -> Type:
    if isinstance(t, Type):
        return t
    if isinstance(t, type) and issubclass(t, Type):
        return t()
    raise TypeError(f"not a schema type: {t!r}")


class _Int(Type):
    bits = 32

    def __init__(self) -> None:
        self.label = f"int{self.bits}"
        self.lo = -(1 << (self.bits - 1))
        self.hi = (1 << (self.bits - 1)) - 1

    def compile(self, version: int, encode: bool) -> Check:
        lo, hi, label = self.lo, self.hi, self.label

        def check(v: Any, ctx: Any) -> Any:
            if type(v) is int and lo <= v <= hi:
                return v
            raise FieldError(f"expected {label}, got {describe(v)}")

        return check


class Int8(_Int):
    bits = 8


class Int16(_Int):
    bits = 16


class Int32(_Int):
    bits = 32


class Int64(_Int):
    bits = 64


class Bool(Type):
    label = "bool"

    def compile(self, version: int, encode: bool) -> Check:
        def check(v: Any, ctx: Any) -> Any:
            if type(v) is bool:
                return v
            raise FieldError(f"expected bool, got {describe(v)}")

        return check


class Str(Type):
    """UTF-8 string; ``max_length`` counts characters (Kafka's int16 length bound)."""

    nullable = False

    def __init__(self, max_length: int = 32767) -> None:
        self.max_length = max_length
        self.label = "nullable str" if self.nullable else "str"

    def compile(self, version: int, encode: bool) -> Check:
        limit, nullable, label = self.max_length, self.nullable, self.label

        def check(v: Any, ctx: Any) -> Any:
            if type(v) is str:
                if len(v) <= limit:
                    return v
                raise FieldError(f"{label} of {len(v)} chars exceeds max_length {limit}")
            if v is None and nullable:
                return v
            raise FieldError(f"expected {label}, got {describe(v)}")

        return check


class NullableStr(Str):
    nullable = True


class Bytes(Type):
    """Opaque bytes kept inside msgpack (small payloads: group metadata, assignments)."""

    nullable = False

    def __init__(self, max_length: int = 8 * 1024 * 1024) -> None:
        self.max_length = max_length
        self.label = "nullable bytes" if self.nullable else "bytes"

    def compile(self, version: int, encode: bool) -> Check:
        limit, nullable, label = self.max_length, self.nullable, self.label
        accepted = (bytes, bytearray, memoryview) if encode else (bytes,)

        def check(v: Any, ctx: Any) -> Any:
            if type(v) in accepted:
                size = v.nbytes if type(v) is memoryview else len(v)
                if size <= limit:
                    return v
                raise FieldError(f"{label} of {size} bytes exceeds max_length {limit}")
            if v is None and nullable:
                return v
            raise FieldError(f"expected {label}, got {describe(v)}")

        return check


class NullableBytes(Bytes):
    nullable = True


class Records(Type):
    """Record batch bytes carried raw in the frame tail (never copied on decode)."""

    label = "records"

    def has_records(self) -> bool:
        return True

    def compile(self, version: int, encode: bool) -> Check:
        return _encode_records if encode else _decode_records


def records_length(v: Any) -> int:
    """Byte length of a Records value: bytes-like, or an object with an int ``length``."""
    t = type(v)
    if t is bytes or t is bytearray:
        return len(v)
    if t is memoryview:
        if not v.contiguous:
            raise FieldError("records memoryview is not contiguous")
        return int(v.nbytes)
    n = getattr(v, "length", None)
    if type(n) is int and n >= 0:
        return n
    raise FieldError(f"expected records (bytes-like or object with .length), got {describe(v)}")


def _encode_records(v: Any, collected: list[Any]) -> int:
    n = records_length(v)
    collected.append(v)
    return n


def _decode_records(v: Any, tail: Tail) -> memoryview:
    if type(v) is int and v >= 0:
        start = tail.pos
        end = start + v
        if end <= len(tail.view):
            tail.pos = end
            return tail.view[start:end]
        raise FieldError(
            f"records length {v} overruns the frame tail ({len(tail.view) - start} bytes left)"
        )
    raise FieldError(f"expected records length (int >= 0), got {describe(v)}")


class Array(Type):
    def __init__(self, of: TypeLike, max_items: int = 1_000_000, nullable: bool = False) -> None:
        self.of = as_type(of)
        self.max_items = max_items
        self.nullable = nullable
        self.label = f"{'nullable ' if nullable else ''}array of {self.of.label}"

    def has_records(self) -> bool:
        return self.of.has_records()

    def compile(self, version: int, encode: bool) -> Check:
        item = self.of.compile(version, encode)
        limit, nullable, label = self.max_items, self.nullable, self.label
        in_place = not encode

        def check(v: Any, ctx: Any) -> Any:
            if type(v) is not list:
                if v is None and nullable:
                    return v
                if not (encode and type(v) is tuple):
                    raise FieldError(f"expected {label}, got {describe(v)}")
            if len(v) > limit:
                raise FieldError(f"array of {len(v)} items exceeds max_items {limit}")
            i = 0
            try:
                if in_place:
                    for i, x in enumerate(v):
                        y = item(x, ctx)
                        if y is not x:
                            v[i] = y
                    return v
                out = []
                for i, x in enumerate(v):  # noqa: B007 (i names the bad item)
                    out.append(item(x, ctx))
                return out
            except FieldError as e:
                e.path.append(f"[{i}]")
                raise

        return check


class Map(Type):
    """A msgpack map; keys are str (or ints) as the key type says."""

    def __init__(self, key: TypeLike, value: TypeLike, max_items: int = 100_000) -> None:
        self.key = as_type(key)
        self.value = as_type(value)
        self.max_items = max_items
        self.label = f"map of {self.key.label} to {self.value.label}"
        if self.key.has_records() or self.value.has_records():
            raise TypeError("Records cannot be map keys or values")

    def compile(self, version: int, encode: bool) -> Check:
        kcheck = self.key.compile(version, encode)
        vcheck = self.value.compile(version, encode)
        limit, label = self.max_items, self.label

        def check(v: Any, ctx: Any) -> Any:
            if type(v) is not dict:
                raise FieldError(f"expected {label}, got {describe(v)}")
            if len(v) > limit:
                raise FieldError(f"map of {len(v)} items exceeds max_items {limit}")
            for k, x in v.items():
                kcheck(k, ctx)
                try:
                    vcheck(x, ctx)
                except FieldError as e:
                    e.path.append(f"[{k!r}]")
                    raise
            return v if not encode else dict(v)

        return check
