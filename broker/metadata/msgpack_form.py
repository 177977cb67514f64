"""The schema language's msgpack form: the records the broker stores, declared as Structs.

The records the cluster keeps on disk, the metadata log's (:mod:`broker.metadata.records`)
and the offsets topic's (:mod:`broker.group.metadata`), are declared once each as a
:class:`clients.protocol.schema.Struct`, the language every API message is declared in.
This module derives from that declaration everything a stored record needs: the msgpack
value written, the decoder with its type, nullability and presence checks, and the check
a frozen dataclass runs on construction.  Only semantic rules (ranges narrower than the
type, topic-name rules, duplicate ids) stay hand-written, next to each record.

Decision (issue 31): the bytes on disk stay msgpack, as before; they did not move to
Kafka's record formats (version + type key, value encoded by
:mod:`clients.protocol.compiler`).  Why:

- every existing data dir reads as it is, with no second (legacy) decoder kept forever;
- the offsets topic is compacted by key bytes: a new key encoding would not replace the
  old record of the same group or partition, and a tombstone in the new form would not
  delete the old one, which would come back after the tombstone is cleaned away;
- a msgpack map is self-describing, so a field added later is read as absent (its
  default) by older data and ignored by older readers, with no version bump.

Kafka's own stored formats remain reachable: a record's Struct can be compiled by
:mod:`clients.protocol.compiler` once a format change is worth a migration (configs,
a ``STRING_MAP`` here, would become an array of name/value structs).

Msgpack form of each schema type, and the in-memory value (the record dataclass field):

| type             | in memory                      | msgpack                                 |
|------------------|--------------------------------|-----------------------------------------|
| INT8..64, UINT16 | int (not bool) in the range    | int                                     |
| BOOL             | bool                           | bool                                    |
| STRING           | str                            | str                                     |
| BYTES            | bytes                          | bin                                     |
| STRING_MAP       | Mapping[str, str]              | map str -> str                          |
| Array(T)         | tuple of T                     | array                                   |
| Struct           | its dataclass                  | map by field name (``to_msgpack_map``)  |
|                  |                                | or array in field order                 |

A field nullable in the record's version may be None (msgpack nil).  Presence: a field
declared with a ``tag`` (Kafka's optional, tagged fields) may be absent, as in a record
written before it existed, and decodes to its default; any other field is required.
Writers write every field, so the bytes are those written before the schema existed.
Unknown map keys and trailing array elements are ignored (a later version may add
fields).  ``STRING_MAP`` is a type of the msgpack form only: the Kafka wire has no map
(:mod:`clients.protocol.compiler` cannot compile a struct holding one; there it would be
an array of name/value structs).

The record dataclasses are written by hand, for mypy; :func:`check_conforms` (run by
``tests/broker/metadata/test_record_schemas.py`` over every record type) asserts that
their field names, order, types and defaults are exactly the Struct's, so the two cannot
drift apart unseen.  That is weaker than generating the dataclasses from the Structs
(a field is still typed twice, once checked against the other); it was chosen because
the semantic checks live in each dataclass's ``__post_init__`` and mypy must see the
classes, and a generator (such as the one for the API messages' types) can replace it.

Costs: encode and decode O(size of the record).  The checker, the encoder (map and
array form) and the decoder of each struct and version are generated once, on first use,
as straight-line Python (exec of generated source, as :mod:`clients.protocol.compiler`
does for the wire) and cached: one local per field, scalar type tests inline, the
dataclass built with positional arguments (:func:`build_from_msgpack`, :func:`builder`);
no error text is built unless a check fails.  Measured (min of 5 x 20,000, one run, one
machine; us per call, encode / decode, decode including msgpack and the dataclass's
``__post_init__``), the hand-written code before the schema (bfaa33a~1) -> the
generic plan walk (4646484) -> this:

| record                            | hand-written | plan walk   | compiled    |
|-----------------------------------|--------------|-------------|-------------|
| PartitionRecord                   | 1.45 / 3.80  | 2.15 / 8.67 | 1.41 / 3.96 |
| RegisterBrokerRecord              | 1.25 / 2.58  | 1.77 / 5.80 | 1.21 / 2.51 |
| offset commit key                 | 0.56 / 0.90  | 1.01 / 1.46 | 0.58 / 0.96 |
| offset commit value               | 0.57 / 0.97  | 1.03 / 1.62 | 0.59 / 1.03 |
| group metadata value, 3 members   | 1.30 / 5.81  | 3.61 / 9.40 | 1.32 / 4.20 |

(differences of 0.05 us are within the noise of the shared machine.)  In the
replication simulation (no_loss, 6 seeds, cProfile) decode_record fell from 4.0% to
1.9% of the time; its steps/s moved within noise (5,200-5,900 both before and after).
Thread-safety: pure functions; the cache is filled idempotently.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

from clients.protocol.schema import BOOL, BYTES, FLOAT64, STRING, Array, Field, Fixed, Struct, Type

ErrorFactory = Callable[[str], Exception]
T = TypeVar("T")
# the dataclass that holds each nested Struct's values (keyed by the Struct itself)
Classes = Mapping[Struct, Callable[..., Any]]


class StringMap(Type):
    """A map of str to str (topic configs): a type of the msgpack form only."""

    name = "map[string]string"

    def default(self) -> dict[str, str]:
        return {}


STRING_MAP = StringMap()
_NO_CLASSES: Classes = {}


class _Slot(NamedTuple):
    """One field as the codec walks it (computed once per struct and version)."""

    field: Field
    name: str
    nullable: bool
    optional: bool  # tagged: may be absent, then takes its default
    scalar: bool  # msgpack value == in-memory value: encode as is, decode by a check
    valid: Callable[[object], bool]  # is this a non-None in-memory value of the type


_PLANS: dict[tuple[Struct, int], tuple[_Slot, ...]] = {}  # a Struct hashes by identity


def _plan(struct: Struct, version: int) -> tuple[_Slot, ...]:
    key = (struct, version)
    plan = _PLANS.get(key)
    if plan is None:
        plan = tuple(
            _Slot(f, f.name, f.is_nullable(version), f.tag is not None,
                  isinstance(f.type, Fixed) or f.type in (STRING, BYTES), validator(f.type))
            for f in struct.fields_at(version))
        _PLANS[key] = plan
    return plan


# -- compiled per struct and version ------------------------------------------------------
# Each function below is generated once per (struct, version[, form]) as straight-line
# source (like clients.protocol.compiler) and cached: one local per field, the type test
# of a scalar inline, no per-call walk over the plan.  The generated code makes exactly
# the checks, in exactly the order, and raises exactly the messages of the plan walk it
# replaced; anything but the common shape (a non-list array, a string map) calls the
# field's validator, as that walk did.

_Checker = Callable[[object, ErrorFactory], None]
_Encoder = Callable[[object], Any]
# (raw, error, classes, make): make(*fields) if make is given, else the fields by name
_Decoder = Callable[..., Any]
_CHECKERS: dict[tuple[Struct, int], _Checker] = {}
_ENCODERS: dict[tuple[Struct, int, bool], _Encoder] = {}
_DECODERS: dict[tuple[Struct, int, bool], _Decoder] = {}


def _inline_test(ftype: Type, var: str) -> str | None:
    """Source of an expression true iff ``var`` (not None) is a value of ``ftype``, for
    the types whose test is a type identity (and range); None for the others."""
    if isinstance(ftype, Fixed):
        if ftype is BOOL:
            return f"type({var}) is bool"
        if ftype is FLOAT64:
            return f"type({var}) is float"
        return f"(type({var}) is int and {int(ftype.low)} <= {var} <= {int(ftype.high)})"
    if ftype is STRING:
        return f"type({var}) is str"
    if ftype is BYTES:
        return f"type({var}) is bytes"
    return None


def _compile(source: str, name: str, namespace: dict[str, Any], struct: Struct) -> Any:
    # the file name tells a profile's functions apart (one per struct and form)
    exec(compile(source, f"<msgpack_form {name} {struct.label}>", "exec"), namespace)
    return namespace[name]


def _checker(struct: Struct, version: int) -> _Checker:
    key = (struct, version)
    check = _CHECKERS.get(key)
    if check is not None:
        return check
    ns: dict[str, Any] = {"_short": _short}
    lines = ["def check(record, error):"]
    for i, slot in enumerate(_plan(struct, version)):
        ftype = slot.field.type
        ns[f"what{i}"] = (f"{struct.label}: {slot.name} must be "
                          f"{_describe(ftype, slot.nullable)}, got ")
        fail = f"raise error(what{i} + _short(v))"
        lines.append(f"    v = record.{slot.name}")
        element_test = (_inline_test(ftype.element, "e") if isinstance(ftype, Array)
                        else None)
        if element_test is not None:  # a tuple of scalars: its elements tested inline
            indent = "        " if slot.nullable else "    "
            if slot.nullable:
                lines.append("    if v is not None:")
            lines += [f"{indent}if type(v) is not tuple:", f"{indent}    {fail}",
                      f"{indent}for e in v:", f"{indent}    if not ({element_test}):",
                      f"{indent}        {fail}"]
            continue
        test = _inline_test(ftype, "v")
        if test is None:
            ns[f"valid{i}"] = slot.valid
            test = f"valid{i}(v)"
        guard = f"v is not None and not ({test})" if slot.nullable else \
            f"v is None or not ({test})"
        lines += [f"    if {guard}:", f"        {fail}"]
    lines.append("    return None")
    check = _compile("\n".join(lines), "check", ns, struct)
    _CHECKERS[key] = check
    return check


def _encoder(struct: Struct, version: int, by_name: bool) -> _Encoder:
    key = (struct, version, by_name)
    encode = _ENCODERS.get(key)
    if encode is not None:
        return encode
    ns: dict[str, Any] = {}
    items = []
    for i, slot in enumerate(_plan(struct, version)):
        ftype = slot.field.type
        get = f"r.{slot.name}"
        if slot.scalar:
            item = get
        elif isinstance(ftype, Array) and isinstance(ftype.element, Struct):
            ns[f"enc{i}"] = _encoder(ftype.element, version, by_name)
            item = f"(None if (v{i} := {get}) is None else [enc{i}(e) for e in v{i}])"
        elif isinstance(ftype, Array):
            item = f"(None if (v{i} := {get}) is None else list(v{i}))"
        elif ftype is STRING_MAP:
            item = f"(None if (v{i} := {get}) is None else dict(v{i}))"
        elif isinstance(ftype, Struct):
            ns[f"enc{i}"] = _encoder(ftype, version, by_name)
            item = f"(None if (v{i} := {get}) is None else enc{i}(v{i}))"
        else:
            item = get
        items.append(f"{slot.name!r}: {item}" if by_name else item)
    body = "{" + ", ".join(items) + "}" if by_name else "[" + ", ".join(items) + "]"
    encode = _compile(f"def encode(r):\n    return {body}", "encode", ns, struct)
    _ENCODERS[key] = encode
    return encode


def _decoder(struct: Struct, version: int, by_name: bool) -> _Decoder:
    key = (struct, version, by_name)
    decode = _DECODERS.get(key)
    if decode is not None:
        return decode
    ns: dict[str, Any] = {"_describe": _describe}
    label = struct.label
    lines = ["def decode(raw, error, classes, make):"]
    if by_name:
        ns["not_map"] = f"{label} is "
        lines += ["    if type(raw) is not dict:",
                  "        raise error(not_map + type(raw).__name__ + ', not a map')"]
    else:
        ns["not_array"] = f"{label} is "
        lines += ["    if type(raw) is not list:",
                  "        raise error(not_array + type(raw).__name__ + ', not array')",
                  "    count = len(raw)"]
    plan = _plan(struct, version)
    for i, slot in enumerate(plan):
        v = f"v{i}"
        if by_name:
            present, fetch = f"{slot.name!r} in raw", f"raw[{slot.name!r}]"
            where = slot.name
            absent = f"{label} record has no {slot.name!r}"
        else:
            present, fetch = f"count > {i}", f"raw[{i}]"
            where = f"field {i}"
            absent = f"{label}: field {i} missing"
        ns[f"bad{i}"] = (f"{label}: {where} is ",
                         f", not {_describe(slot.field.type, slot.nullable)}")
        lines += [f"    if {present}:", f"        {v} = {fetch}"]
        lines += ["        " + line for line in _decode_field(slot, i, version, by_name, ns)]
        if slot.optional:
            default = slot.field.default
            ns[f"default{i}"] = default
            lines += ["    else:",
                      f"        {v} = dict(default{i})" if isinstance(default, dict)
                      else f"        {v} = default{i}"]
        else:
            ns[f"absent{i}"] = absent
            lines += ["    else:", f"        raise error(absent{i})"]
    lines += ["    if make is not None:",
              "        return make(" + ", ".join(f"v{i}" for i in range(len(plan))) + ")",
              "    return {" + ", ".join(f"{slot.name!r}: v{i}"
                                       for i, slot in enumerate(plan)) + "}"]
    decode = _compile("\n".join(lines), "decode", ns, struct)
    _DECODERS[key] = decode
    return decode


def _decode_field(slot: _Slot, i: int, version: int, by_name: bool,
                  ns: dict[str, Any]) -> list[str]:
    """Source checking (and converting) the msgpack value in ``v{i}`` in place."""
    v, ftype = f"v{i}", slot.field.type
    fail = [f"raise error(bad{i}[0] + type({v}).__name__ + bad{i}[1])"]
    skip_none = f"{v} is not None and " if slot.nullable else ""
    test = _inline_test(ftype, v)
    if test is not None:
        return [f"if {skip_none}not ({test}):", "    " + fail[0]]
    if isinstance(ftype, Struct):
        ns[f"dec{i}"], ns[f"struct{i}"] = _decoder(ftype, version, by_name), ftype
        build = f"{v} = dec{i}({v}, error, classes, classes[struct{i}])"
        return [f"if {v} is not None:", "    " + build] if slot.nullable else [build]
    ns[f"valid{i}"] = slot.valid
    generic = [f"elif {skip_none}not valid{i}({v}):", "    " + fail[0]]
    if isinstance(ftype, Array):
        element = ftype.element
        if isinstance(element, Struct):
            ns[f"dec{i}"] = _decoder(element, version, by_name)
            ns[f"struct{i}"] = element
            return [f"if type({v}) is list:",
                    f"    make_e, dec_e = classes[struct{i}], dec{i}",
                    f"    {v} = tuple([dec_e(e, error, classes, make_e) for e in {v}])",
                    *generic]
        element_test = _inline_test(element, "e")
        if element_test is None:
            ns[f"valid_element{i}"] = validator(element)
            element_test = f"valid_element{i}(e)"
        return [f"if type({v}) is list:",
                "    for e in " + v + ":",
                f"        if not ({element_test}):",
                "            " + fail[0],
                f"    {v} = tuple({v})",
                *generic]
    return [f"if {skip_none}not valid{i}({v}):", "    " + fail[0]]


# -- in memory ---------------------------------------------------------------------------


def validator(ftype: Type) -> Callable[[object], bool]:
    """Whether a value is an in-memory value of ``ftype`` (None excluded)."""
    if isinstance(ftype, Fixed):
        if ftype is BOOL:
            return lambda v: type(v) is bool
        if ftype is FLOAT64:
            return lambda v: type(v) is float
        low, high = ftype.low, ftype.high
        return lambda v: type(v) is int and low <= v <= high
    if ftype is STRING:
        return lambda v: type(v) is str
    if ftype is BYTES:
        return lambda v: type(v) is bytes
    if ftype is STRING_MAP:
        return lambda v: isinstance(v, Mapping) and all(
            type(k) is str and type(x) is str for k, x in v.items())
    if isinstance(ftype, Array):
        element = validator(ftype.element)
        return lambda v: type(v) is tuple and all(element(x) for x in v)
    if isinstance(ftype, Struct):
        return lambda v: dataclasses.is_dataclass(v) and not isinstance(v, type)
    raise TypeError(f"{ftype!r} has no msgpack form")


def check_fields(record: object, struct: Struct, version: int, error: ErrorFactory) -> None:
    """Raise ``error`` naming the first field of ``record`` whose value is not of its
    declared type (or is None where the field is not nullable)."""
    (_CHECKERS.get((struct, version)) or _checker(struct, version))(record, error)


def _describe(ftype: Type, nullable: bool) -> str:
    bound = ""
    if isinstance(ftype, Fixed) and ftype not in (BOOL, FLOAT64):
        bound = f" in [{int(ftype.low)}, {int(ftype.high)}]"
    return f"{ftype.name}{bound}" + (" or nil" if nullable else "")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- encode ------------------------------------------------------------------------------


def to_msgpack_map(record: object, struct: Struct, version: int) -> dict[str, Any]:
    """The msgpack map of ``record``: every field of ``version`` by name (nested structs
    as maps too).  Values are not checked."""
    encode = _ENCODERS.get((struct, version, True)) or _encoder(struct, version, True)
    result: dict[str, Any] = encode(record)
    return result


def to_msgpack_array(record: object, struct: Struct, version: int) -> list[Any]:
    """The msgpack array of ``record``: every field of ``version`` in declared order
    (nested structs as arrays too).  Values are not checked."""
    encode = _ENCODERS.get((struct, version, False)) or _encoder(struct, version, False)
    result: list[Any] = encode(record)
    return result


def array_encoder(struct: Struct, version: int) -> Callable[[object], list[Any]]:
    """:func:`to_msgpack_array` for ``struct`` at ``version``, looked up once: for a
    caller that encodes one struct often (an offsets-topic key or value)."""
    encode: Callable[[object], list[Any]] = _encoder(struct, version, False)
    return encode


# -- decode ------------------------------------------------------------------------------


def from_msgpack(raw: object, struct: Struct, version: int, *, by_name: bool,
                 error: ErrorFactory, classes: Classes = _NO_CLASSES) -> dict[str, Any]:
    """The fields of one record from its msgpack value ``raw`` (a map by field name if
    ``by_name``, else an array in field order), as keyword arguments for its dataclass:
    types and nullability checked, arrays as tuples, nested structs built with
    ``classes``, absent optional fields set to their defaults.  Anything wrong raises
    ``error`` with the field's name (map) or index (array)."""
    decode = (_DECODERS.get((struct, version, by_name))
              or _decoder(struct, version, by_name))
    fields: dict[str, Any] = decode(raw, error, classes, None)
    return fields


def builder(cls: Callable[..., T], struct: Struct, version: int, *, by_name: bool,
            error: ErrorFactory, classes: Classes = _NO_CLASSES) -> Callable[[object], T]:
    """:func:`build_from_msgpack` for ``cls`` with every argument but ``raw`` bound once:
    for a caller that decodes one struct often (a metadata record type, an offsets-topic
    key or value of the current version)."""
    return functools.partial(_decoder(struct, version, by_name), error=error,
                             classes=classes, make=cls)


def build_from_msgpack(cls: Callable[..., T], raw: object, struct: Struct, version: int, *,
                       by_name: bool, error: ErrorFactory,
                       classes: Classes = _NO_CLASSES) -> T:
    """``cls(**from_msgpack(raw, ...))`` without the keyword dict: the fields are passed
    in declared order, so ``cls`` must declare exactly the struct's fields in that order
    (:func:`check_conforms`)."""
    decode = (_DECODERS.get((struct, version, by_name))
              or _decoder(struct, version, by_name))
    record: T = decode(raw, error, classes, cls)
    return record


# -- conformance of the hand-written dataclasses ------------------------------------------


def python_annotation(ftype: Type, nullable: bool, names: Mapping[Struct, str]) -> str:
    """The annotation a dataclass field of ``ftype`` has (as written in the source)."""
    if isinstance(ftype, Fixed):
        text = "bool" if ftype is BOOL else "float" if ftype is FLOAT64 else "int"
    elif ftype is STRING:
        text = "str"
    elif ftype is BYTES:
        text = "bytes"
    elif ftype is STRING_MAP:
        text = "Mapping[str, str]"
    elif isinstance(ftype, Array):
        text = f"tuple[{python_annotation(ftype.element, False, names)}, ...]"
    elif isinstance(ftype, Struct):
        text = names[ftype]
    else:
        raise TypeError(f"{ftype!r} has no msgpack form")
    return f"{text} | None" if nullable else text


def check_conforms(cls: type, struct: Struct, version: int,
                   names: Mapping[Struct, str]) -> None:
    """Raise TypeError unless dataclass ``cls`` declares exactly the fields of ``struct``
    at ``version``: same names in the same order, the annotation of each field's type,
    and a default equal to the field's where the class has one (an optional, tagged
    field must have one)."""
    declared = list(dataclasses.fields(cls))
    plan = _plan(struct, version)
    if [d.name for d in declared] != [slot.name for slot in plan]:
        raise TypeError(f"{cls.__name__} fields {[d.name for d in declared]} are not the "
                        f"schema's {[slot.name for slot in plan]}")
    for d, slot in zip(declared, plan, strict=True):
        f = slot.field
        want = python_annotation(f.type, slot.nullable, names)
        if d.type != want:
            raise TypeError(f"{cls.__name__}.{d.name} is {d.type}, the schema says {want}")
        if d.default is not dataclasses.MISSING:
            default: Any = d.default
        elif d.default_factory is not dataclasses.MISSING:
            default = d.default_factory()
        elif slot.optional:
            raise TypeError(f"{cls.__name__}.{d.name} is optional in the schema: "
                            f"give it the default {f.default!r}")
        else:
            continue
        if default != f.default or type(default) is not type(f.default):
            raise TypeError(f"{cls.__name__}.{d.name} defaults to {default!r}, the schema "
                            f"to {f.default!r}")
