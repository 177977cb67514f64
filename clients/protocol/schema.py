"""Schema mini-language for the native wire protocol, compiled to fast checkers.

An API body is declared once as a :class:`Struct` of typed fields::

    Struct(
        acks=Int16,
        topics=Array(Struct(name=Str, partitions=Array(Struct(index=Int32, records=Records)))),
        transactional_id=Field(NullableStr, default=None),
        new_thing=Field(Int32, since=1, default=-1),
    )

The wire types (``Int16``, ``Str``, ``Records``, ``Array``, ``Map``, ...) and their
msgpack forms are in :mod:`clients.protocol.wire_types`; this module
holds the struct layer: :class:`Field` (first version, default) and :class:`Struct`,
compiled per version into encoder and decoder checkers.

A field with ``since=N`` exists on the wire only from version N; decoding an older
version fills in its default, encoding an older version drops it (it is an error to
give a non-default value that the version cannot carry).  A field with a default may be
omitted by the encoder's caller.  Records values are not put in msgpack: the encoder
replaces each by its length and collects the value (bytes-like, or any object with an
int ``length`` such as a file region) in depth-first field order; the decoder replaces
each length by a zero-copy slice of the frame's tail, in the same order.

Costs: :meth:`Struct.compile` walks the declaration once per version (O(fields)).
Encoding and decoding then cost O(values) with one closure call per value and no
per-field path strings; the path of a bad value (``topics[0].partitions[1].index``) is
built only when raising.  Decoding validates in place (the msgpack output is owned by
the decoder); encoding builds new dicts and never mutates the caller's body.

Thread/process safety: declarations and compiled codecs are immutable after
construction and may be shared freely; every call keeps its state on the stack.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from clients.protocol.wire_types import (
    Check,
    FieldError,
    Type,
    TypeLike,
    _Int,
    as_type,
    describe,
)

__all__ = ["Field", "Struct"]

_MISSING: Any = object()


@dataclass(frozen=True)
class Field:
    """A struct field with its first version and its default (for omitted/older)."""

    type: TypeLike
    since: int = 0
    default: Any = _MISSING

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING


def _default(d: Any) -> Any:
    return copy.deepcopy(d) if isinstance(d, (list, dict)) else d


class Struct(Type):
    """Named fields in declaration order (the order Records bytes take in the tail)."""

    label = "struct"

    def __init__(self, **fields: TypeLike | Field) -> None:
        self.fields: dict[str, Field] = {}
        self.types: dict[str, Type] = {}
        for name, f in fields.items():
            fld = f if isinstance(f, Field) else Field(f)
            if fld.since > 0 and not fld.has_default:
                raise TypeError(f"field {name!r} added in v{fld.since} needs a default")
            self.fields[name] = fld
            self.types[name] = as_type(fld.type)

    def has_records(self) -> bool:
        return any(t.has_records() for t in self.types.values())

    def wire_fields(self, version: int) -> list[str]:
        return [n for n, f in self.fields.items() if f.since <= version]

    def compile(self, version: int, encode: bool) -> Check:
        # Int fields are checked inline (no call per value); they never touch the tail,
        # so checking them first keeps the depth-first order of Records fields.
        ints: list[tuple[str, int, int, str, Any]] = []
        rest: list[tuple[str, Check, Any]] = []
        for n in self.wire_fields(version):
            t, default = self.types[n], self.fields[n].default
            if isinstance(t, _Int):
                ints.append((n, t.lo, t.hi, t.label, default))
            else:
                rest.append((n, t.compile(version, encode), default))
        later = {n: f for n, f in self.fields.items() if f.since > version}
        if encode:
            return _struct_encoder(ints, rest, later, version)
        return _struct_decoder(ints, rest, later, version)


_Ints = list[tuple[str, int, int, str, Any]]
_Rest = list[tuple[str, Check, Any]]


def _struct_decoder(ints: _Ints, rest: _Rest, later: dict[str, Field], version: int) -> Check:
    absent = [(n, f.default) for n, f in later.items()]
    int_fields = [(n, lo, hi, label) for n, lo, hi, label, _ in ints]
    other_fields = [(n, c) for n, c, _ in rest]
    n_wire = len(ints) + len(rest)

    def check(v: Any, ctx: Any) -> Any:
        if type(v) is not dict:
            raise FieldError(f"expected struct, got {describe(v)}")
        name = ""
        try:
            for name, lo, hi, label in int_fields:
                x = v[name]
                if type(x) is not int or not lo <= x <= hi:
                    raise FieldError(f"expected {label}, got {describe(x)}")
            for name, field_check in other_fields:
                x = v[name]
                y = field_check(x, ctx)
                if y is not x:
                    v[name] = y
        except KeyError:  # only our own v[name] lookups raise it
            raise FieldError("missing field", [name]) from None
        except FieldError as e:
            e.path.append(name)
            raise
        if len(v) != n_wire:
            known = {f[0] for f in int_fields} | {f[0] for f in other_fields}
            extra = sorted(repr(k) for k in v if k not in known)
            raise FieldError(f"unexpected field(s) {', '.join(extra)} in v{version}")
        for name, default in absent:
            v[name] = _default(default)
        return v

    return check


def _struct_encoder(ints: _Ints, rest: _Rest, later: dict[str, Field], version: int) -> Check:
    def check(v: Any, ctx: Any) -> Any:
        if type(v) is not dict:
            raise FieldError(f"expected struct (dict), got {describe(v)}")
        out = {}
        given = 0
        name = ""
        try:
            for name, lo, hi, label, default in ints:
                x = v.get(name, _MISSING)
                if x is _MISSING:
                    if default is _MISSING:
                        raise FieldError("missing field")
                    x = default
                else:
                    given += 1
                if type(x) is not int or not lo <= x <= hi:
                    raise FieldError(f"expected {label}, got {describe(x)}")
                out[name] = x
            for name, field_check, default in rest:
                x = v.get(name, _MISSING)
                if x is _MISSING:
                    if default is _MISSING:
                        raise FieldError("missing field")
                    x = _default(default)
                else:
                    given += 1
                out[name] = field_check(x, ctx)
        except FieldError as e:
            e.path.append(name)
            raise
        if given != len(v):
            _check_extra_keys(v, out, later, version)
        return out

    return check


def _check_extra_keys(
    v: dict[Any, Any], out: dict[str, Any], later: dict[str, Field], version: int
) -> None:
    for k, x in v.items():
        if k in out:
            continue
        f = later.get(k)
        if f is None:
            raise FieldError(f"unexpected field {k!r} in v{version}")
        if x != f.default:
            raise FieldError(
                f"field exists only from v{f.since}; v{version} cannot carry {describe(x)}",
                [str(k)],
            )
