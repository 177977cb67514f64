"""The schema language every API message is declared in: typed fields with version ranges.

A message body is a :class:`Struct` of :class:`Field` s, each with a wire type and the
versions it exists in, written the way Kafka's protocol guide writes them::

    Struct(
        Field("transactional_id", STRING, "3+", nullable="3+", default=None),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field("topics", Array(Struct(
            Field("name", STRING),
            Field("partitions", Array(Struct(
                Field("index", INT32),
                Field("records", RECORDS, nullable="0+"),
            ))),
        ))),
    )

Field names are ours (snake_case, close to Kafka's); the wire never carries names, only
the order, types and versions, which follow Kafka's documented schemas exactly.

Wire types (all integers big-endian; *flexible* versions are those at or above a
message's ``flexible`` version, KIP-482):

| type      | Python value        | classic encoding                | flexible encoding           |
|-----------|---------------------|---------------------------------|-----------------------------|
| INT8..64  | int                 | 1/2/4/8 bytes, signed           | same                        |
| UINT16    | int                 | 2 bytes, unsigned               | same                        |
| FLOAT64   | float               | 8 bytes IEEE 754                | same                        |
| BOOL      | bool                | 1 byte, 0 or 1                  | same                        |
| UUID      | bytes (16)          | 16 bytes                        | same                        |
| STRING    | str (None: null)    | int16 length (-1 null) + utf-8  | uvarint length+1 (0 null)   |
| BYTES     | bytes (None: null)  | int32 length (-1 null) + bytes  | uvarint length+1 (0 null)   |
| RECORDS   | bytes-like / region | as BYTES; decoded zero-copy     | as BYTES                    |
| Array(T)  | list (None: null)   | int32 count (-1 null) + items   | uvarint count+1 (0 null)    |
| Struct    | dict by field name  | fields in order                 | fields, then tagged fields  |

A flexible struct ends with its *tagged fields*: uvarint count, then per field uvarint
tag, uvarint size and the value in flexible encoding.  A field declared with ``tag=N`` is
carried there (only when its value differs from the default), not in the field order;
unknown tags are skipped on decode.

Defaults: a field absent from a version decodes to its default and is not encoded.
Without an explicit ``default``: 0 for numbers, False, "" for strings, b"" for bytes, the
zero UUID, [] for arrays, None for records and for fields nullable in every version.

Costs: declaring is O(fields); :mod:`clients.protocol.compiler` turns a struct into an
encoder and a decoder per version.  Thread/process safety: declarations are immutable
after construction and may be shared freely.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_VERSION = 32767
_VERSIONS = re.compile(r"^(\d+)(?:(\+)|-(\d+))?$")


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive range of versions; ``high`` None means open-ended (``"3+"``)."""

    low: int
    high: int | None

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version and (
            self.high is None or version <= self.high
        )

    def __str__(self) -> str:
        if self.high is not None and self.high < self.low:
            return "none"
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


NO_VERSIONS = Versions(MAX_VERSION + 1, MAX_VERSION)


def versions(spec: str | Versions | None) -> Versions:
    """Parse ``"3+"``, ``"0-4"``, ``"7"`` or ``"none"`` (None means none)."""
    if isinstance(spec, Versions):
        return spec
    if spec is None or spec == "none":
        return NO_VERSIONS
    match = _VERSIONS.match(spec)
    if match is None:
        raise ValueError(f"bad version range {spec!r} (use '3+', '0-4' or '7')")
    low = int(match.group(1))
    if match.group(2):
        return Versions(low, None)
    high = int(match.group(3)) if match.group(3) else low
    if high < low:
        raise ValueError(f"bad version range {spec!r}: {high} < {low}")
    return Versions(low, high)


class Type:
    """A wire type (see the table in the module docstring)."""

    name = "type"

    def default(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class Fixed(Type):
    """A fixed-size scalar: ``fmt`` is its :mod:`struct` format character(s)."""

    def __init__(self, name: str, fmt: str, size: int, low: float = 0, high: float = 0,
                 zero: Any = 0) -> None:
        self.name, self.fmt, self.size = name, fmt, size
        self.low, self.high, self.zero = low, high, zero

    def default(self) -> Any:
        return self.zero


INT8 = Fixed("int8", "b", 1, -(1 << 7), (1 << 7) - 1)
INT16 = Fixed("int16", "h", 2, -(1 << 15), (1 << 15) - 1)
INT32 = Fixed("int32", "i", 4, -(1 << 31), (1 << 31) - 1)
INT64 = Fixed("int64", "q", 8, -(1 << 63), (1 << 63) - 1)
UINT16 = Fixed("uint16", "H", 2, 0, (1 << 16) - 1)
FLOAT64 = Fixed("float64", "d", 8, float("-inf"), float("inf"), 0.0)
BOOL = Fixed("bool", "?", 1, 0, 1, False)
UUID = Fixed("uuid", "16s", 16, zero=bytes(16))


class Variable(Type):
    """A length-prefixed value: ``string``, ``bytes`` or ``records``."""

    def __init__(self, name: str, zero: Any) -> None:
        self.name, self.zero = name, zero

    def default(self) -> Any:
        return self.zero


STRING = Variable("string", "")
BYTES = Variable("bytes", b"")
RECORDS = Variable("records", None)


class Array(Type):
    """An array of ``element`` (a scalar, a variable type or a struct)."""

    def __init__(self, element: Type) -> None:
        self.element = element
        self.name = f"[]{element.name}"

    def default(self) -> Any:
        return []


_MISSING: Any = object()


class Field:
    """One field: name, type, versions it exists in, nullability, tag and default."""

    __slots__ = ("default", "name", "nullable", "tag", "tagged", "type", "versions")

    def __init__(
        self,
        name: str,
        type: Type,
        in_versions: str | Versions = "0+",
        *,
        nullable: str | Versions | None = None,
        tag: int | None = None,
        tagged: str | Versions | None = None,
        default: Any = _MISSING,
    ) -> None:
        if not name.isidentifier():
            raise ValueError(f"field name {name!r} is not an identifier")
        if (tag is None) != (tagged is None):
            raise ValueError(f"field {name!r}: give both tag and tagged versions, or neither")
        self.name = name
        self.type = type
        self.versions = versions(in_versions)
        self.nullable = versions(nullable)
        self.tag = tag
        self.tagged = versions(tagged)
        if default is _MISSING:
            nullable_everywhere = nullable is not None and self.nullable.low <= self.versions.low
            default = None if nullable_everywhere else type.default()
        self.default = default

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.type!r}, {str(self.versions)!r})"


class Struct(Type):
    """Fields in wire order; a struct's identity is its declaration (not compared)."""

    name = "struct"

    def __init__(self, *fields: Field, label: str = "struct") -> None:
        seen: set[str] = set()
        tags: set[int] = set()
        for f in fields:
            if f.name in seen:
                raise ValueError(f"{label}: field {f.name!r} declared twice")
            seen.add(f.name)
            if f.tag is not None:
                if f.tag in tags:
                    raise ValueError(f"{label}: tag {f.tag} used twice")
                tags.add(f.tag)
        self.fields: tuple[Field, ...] = fields
        self.label = label

    def default(self) -> Any:
        raise TypeError(f"{self.label}: a struct field has no default (declare one)")

    def fields_at(self, version: int) -> list[Field]:
        """Fields present in ``version`` (tagged ones included), in wire order."""
        return [f for f in self.fields if version in f.versions]

    def __repr__(self) -> str:
        return f"Struct({', '.join(f.name for f in self.fields)})"
