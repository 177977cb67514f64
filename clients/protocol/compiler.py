"""Compile a :class:`~clients.protocol.schema.Struct` at one version into Python code.

For each (struct, version, flexible) the compiler writes the source of two straight-line
functions and ``exec`` s it once:

- ``decode(buf, pos, end) -> (dict, pos)``: reads one value of the struct from ``buf``
  (a byte ``memoryview``) at ``pos``; ``end`` bounds every length.  Runs of fixed-size
  fields are read with one precompiled :class:`struct.Struct` each; strings are decoded
  as UTF-8; ``RECORDS`` values are zero-copy slices of ``buf``; array counts are checked
  against the bytes left before any list is built, so a hostile count costs nothing.
- ``encode(value, out, parts) -> out``: appends the wire form of the dict ``value`` to
  the ``bytearray`` ``out``.  A large or non-bytes ``RECORDS`` value (a file region sent
  with ``sendfile``) is not copied: ``out`` is closed into ``parts``, the value appended
  after it, and a new ``bytearray`` returned, so a message becomes a list of buffers.
  Missing keys take the field's default; keys the version does not carry are ignored.

Failures raise whatever Python raises on bad input (``struct.error``, ``KeyError``,
``TypeError``, ``UnicodeError``, :class:`WireError` for a bad length or count); the
codec (:mod:`clients.protocol.codec`) catches them and asks the reference walker
(:mod:`clients.protocol.reference`) for the precise field path, so the fast path never
builds a path string.

Costs: compiling is O(fields) and happens once per (API, version, direction), on first
use.  A compiled decoder costs one ``unpack_from`` per run of fixed fields, one slice per
string and one call per struct element; encoding is symmetrical.  Thread/process
safety: compiled functions are pure (all state on the stack) and may be shared freely.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Callable
from typing import Any

from clients.protocol.schema import (
    RECORDS,
    STRING,
    Array,
    Field,
    Fixed,
    Struct,
    Type,
    Variable,
)

Decoder = Callable[[Any, int, int], tuple[dict[str, Any], int]]
Encoder = Callable[[dict[str, Any], bytearray, list[Any]], bytearray]

# RECORDS values up to this size are copied into the message instead of becoming a part
# of their own (a syscall-level buffer costs more than a small copy).
INLINE_RECORDS_BYTES = 1024


class WireError(ValueError):
    """A length, count or null that the schema does not allow (found while decoding)."""


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (Kafka's uvarint) -> (value, new pos)."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise WireError("unsigned varint longer than 5 bytes")


def uvarint(value: int) -> bytes:
    """Encode a non-negative int < 2**32 as an unsigned varint."""
    if value < 0x80:
        return _SMALL[value] if value >= 0 else _negative(value)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    if len(out) > 5:
        raise WireError("value does not fit an unsigned varint of 5 bytes")
    return bytes(out)


def _negative(value: int) -> bytes:
    raise WireError(f"unsigned varint cannot carry {value}")


def records_length(value: Any) -> int:
    """Byte length of a RECORDS value: bytes-like, or any object with ``__len__`` (a
    broker's file region) other than text and Python containers (TypeError: they have
    no byte form, and would only fail later, when the frame's parts are joined)."""
    kind = type(value)
    if kind is bytes or kind is bytearray:
        return len(value)
    if kind is memoryview:
        return value.nbytes
    if isinstance(value, _NOT_RECORDS):
        raise TypeError(f"records: expected bytes or a file region, got "
                        f"{type(value).__name__}")
    return len(value)


_NOT_RECORDS = (str, list, tuple, dict, set, frozenset)


_SMALL = [bytes((i,)) for i in range(0x80)]
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NULL16 = _I16.pack(-1)
_NULL32 = _I32.pack(-1)


class _Writer:
    """Indented source lines plus a namespace of the constants they use."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.ns = namespace
        self.depth = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}_{len(self.ns)}"  # "_": never one of the fixed names (P32, I16, ...)
        self.ns[name] = value
        return name

    def var(self, prefix: str = "t") -> str:
        self.ns.setdefault("__vars__", [0])
        self.ns["__vars__"][0] += 1
        return f"{prefix}{self.ns['__vars__'][0]}"


class _Compiler:
    """Compiles the structs reachable from one message at one version."""

    def __init__(self, version: int, flexible: bool, label: str) -> None:
        self.version = version
        self.flexible = flexible
        self.label = label
        self.ns: dict[str, Any] = {
            "WireError": WireError,
            "read_uvarint": read_uvarint,
            "uvarint": uvarint,
            "records_length": records_length,
            "I16": _I16.unpack_from,
            "I32": _I32.unpack_from,
            "P16": _I16.pack,
            "P32": _I32.pack,
            "NULL16": _NULL16,
            "NULL32": _NULL32,
            "INLINE": INLINE_RECORDS_BYTES,
            "INLINE_TYPES": (bytes, bytearray, memoryview),
            "bytearray": bytearray,
            "bytes": bytes,
            "str": str,
            "len": len,
            "list": list,
            "range": range,
            "type": type,
            "memoryview": memoryview,
            "_struct": struct,
            "_deepcopy": copy.deepcopy,
        }
        self.sources: list[str] = []
        self.count = 0

    # -- decoding --------------------------------------------------------------------

    def decoder(self, st: Struct) -> str:
        """Name of the decoder function of ``st`` (compiled into the namespace)."""
        self.count += 1
        name = f"decode_{self.count}"
        w = _Writer(self.ns)
        w.line(f"def {name}(buf, pos, end):")
        w.depth += 1
        d = self._decode_struct(w, st, "end")
        w.line(f"return {d}, pos")
        self.sources.append("\n".join(w.lines))
        return name

    def _decode_struct(self, w: _Writer, st: Struct, end: str) -> str:
        """Emit code reading one ``st`` into a new dict; returns the dict's variable.

        Nested structs are inlined (no call per element); every variable is unique, so an
        inlined struct never clobbers its parent's."""
        values: dict[str, str] = {}
        tagged: list[Field] = []
        present = {f.name for f in st.fields_at(self.version)}
        for f in st.fields:
            if f.name not in present:
                values[f.name] = self._default_expr(w, f)
            elif self.flexible and f.is_tagged(self.version):
                var = w.var("g")
                w.line(f"{var} = {self._default_expr(w, f)}")
                values[f.name] = var
                tagged.append(f)
        run: list[tuple[Field, str]] = []
        for f in st.fields_at(self.version):
            if self.flexible and f.is_tagged(self.version):
                continue
            var = w.var("f")
            values[f.name] = var
            if isinstance(f.type, Fixed):
                run.append((f, var))
                continue
            self._flush_run(w, run)
            run = []
            self._decode_value(w, f.type, var, f.is_nullable(self.version), end)
        self._flush_run(w, run)
        if self.flexible:
            self._decode_tagged(w, tagged, values, end)
        d = w.var("d")
        items = ", ".join(f"{name!r}: {expr}" for name, expr in values.items())
        w.line(f"{d} = {{{items}}}")
        return d

    def _default_expr(self, w: _Writer, f: Field) -> str:
        d = f.default
        if d is None or isinstance(d, (bool, int, float, str, bytes)):
            return repr(d)
        if d == []:
            return "[]"
        return f"_deepcopy({w.const('DEF', d)})"

    def _flush_run(self, w: _Writer, run: list[tuple[Field, str]]) -> None:
        if not run:
            return
        fmt = ">" + "".join(f.type.fmt for f, _ in run)  # type: ignore[attr-defined]
        size = struct.calcsize(fmt)
        unpack = w.const("S", struct.Struct(fmt).unpack_from)
        targets = ", ".join(var for _, var in run)
        w.line(f"{targets}, = {unpack}(buf, pos)")
        w.line(f"pos += {size}")

    def _uvarint(self, w: _Writer, var: str) -> None:
        """Read an unsigned varint into ``var`` (one-byte values inline, the rest by call)."""
        w.line(f"{var} = buf[pos]")
        w.line(f"if {var} < 128:")
        w.line("    pos += 1")
        w.line("else:")
        w.line(f"    {var}, pos = read_uvarint(buf, pos)")

    def _length(self, w: _Writer, var: str, classic: str) -> None:
        """Read a length/count into ``var``; -1 means null in both encodings."""
        if self.flexible:
            self._uvarint(w, var)
            w.line(f"{var} -= 1")
        else:
            w.line(f"{var} = {classic}(buf, pos)[0]")
            w.line(f"pos += {2 if classic == 'I16' else 4}")

    def _null_check(self, w: _Writer, var: str, target: str, nullable: bool, what: str) -> None:
        w.line(f"if {var} < 0:")
        w.depth += 1
        if nullable:
            w.line(f"if {var} != -1:")
            w.line(f"    raise WireError('{what}: length ' + str({var}))")
            w.line(f"{target} = None")
        else:
            w.line(f"raise WireError('{what}: null or negative length ' + str({var}))")
        w.depth -= 1
        w.line("else:")
        w.depth += 1

    def _decode_value(self, w: _Writer, t: Type, target: str, nullable: bool, end: str) -> None:
        if isinstance(t, Fixed):
            unpack = w.const("S", struct.Struct(">" + t.fmt).unpack_from)
            w.line(f"{target}, = {unpack}(buf, pos)")
            w.line(f"pos += {t.size}")
        elif isinstance(t, Variable):
            n = w.var("n")
            self._length(w, n, "I16" if t is STRING else "I32")
            self._null_check(w, n, target, nullable, t.name)
            e = w.var("e")
            w.line(f"{e} = pos + {n}")
            w.line(f"if {e} > {end}:")
            w.line(f"    raise WireError('{t.name} of ' + str({n}) + ' bytes runs past the end')")
            if t is STRING:
                w.line(f"{target} = str(buf[pos:{e}], 'utf-8')")
            elif t is RECORDS:
                w.line(f"{target} = buf[pos:{e}]")
            else:
                w.line(f"{target} = bytes(buf[pos:{e}])")
            w.line(f"pos = {e}")
            w.depth -= 1
        elif isinstance(t, Array):
            n = w.var("n")
            self._length(w, n, "I32")
            self._null_check(w, n, target, nullable, "array")
            el = t.element
            if isinstance(el, Fixed) and el.fmt != "16s":
                w.line(f"if {n} * {el.size} > {end} - pos:")
                w.line(f"    raise WireError('array of ' + str({n}) + ' runs past the end')")
                w.line(f"{target} = list(_struct.unpack_from("
                       f"'>' + str({n}) + {el.fmt!r}, buf, pos))")
                w.line(f"pos += {n} * {el.size}")
            else:
                w.line(f"if {n} > {end} - pos:")
                w.line(f"    raise WireError('array of ' + str({n}) + ' runs past the end')")
                lst = w.var("a")
                w.line(f"{lst} = []")
                w.line(f"for _ in range({n}):")
                w.depth += 1
                if isinstance(el, Struct):
                    item = self._decode_struct(w, el, end)
                else:
                    item = w.var("x")
                    self._decode_value(w, el, item, False, end)
                w.line(f"{lst}.append({item})")
                w.depth -= 1
                w.line(f"{target} = {lst}")
            w.depth -= 1
        elif isinstance(t, Struct):
            if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
                w.line(f"if pos >= {end}:")
                w.line("    raise WireError('struct marker runs past the end')")
                w.line("if buf[pos] >= 128:")
                w.line("    pos += 1")
                w.line(f"    {target} = None")
                w.line("else:")
                w.line("    pos += 1")
                w.depth += 1
            d = self._decode_struct(w, t, end)
            w.line(f"{target} = {d}")
            if nullable:
                w.depth -= 1
        else:  # pragma: no cover - a declaration mistake
            raise TypeError(f"cannot compile type {t!r}")

    def _decode_tagged(self, w: _Writer, tagged: list[Field], values: dict[str, str],
                       end: str) -> None:
        count, tag, size, tag_end = w.var("nt"), w.var("tag"), w.var("size"), w.var("te")
        w.line(f"{count} = buf[pos]")
        w.line(f"if {count} == 0:")
        w.line("    pos += 1")
        w.line("else:")
        w.depth += 1
        w.line(f"{count}, pos = read_uvarint(buf, pos)")
        w.line(f"for _ in range({count}):")
        w.depth += 1
        w.line(f"{tag}, pos = read_uvarint(buf, pos)")
        w.line(f"{size}, pos = read_uvarint(buf, pos)")
        w.line(f"{tag_end} = pos + {size}")
        w.line(f"if {tag_end} > {end}:")
        w.line(f"    raise WireError('tagged field of ' + str({size}) + ' bytes runs past the "
               "end')")
        for i, f in enumerate(tagged):
            w.line(f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
            w.depth += 1
            self._decode_value(w, f.type, values[f.name], f.is_nullable(self.version), tag_end)
            w.depth -= 1
        w.line(f"pos = {tag_end}")
        w.depth -= 2

    # -- encoding --------------------------------------------------------------------

    def encoder(self, st: Struct) -> str:
        self.count += 1
        name = f"encode_{self.count}"
        w = _Writer(self.ns)
        w.line(f"def {name}(v, out, parts):")
        w.depth += 1
        self._encode_struct(w, st, "v")
        w.line("return out")
        self.sources.append("\n".join(w.lines))
        return name

    def _encode_struct(self, w: _Writer, st: Struct, v: str) -> None:
        """Emit code appending the dict in variable ``v`` (nested structs inlined)."""
        fields = st.fields_at(self.version)
        run: list[Field] = []
        for f in fields:
            if self.flexible and f.is_tagged(self.version):
                continue
            if isinstance(f.type, Fixed):
                run.append(f)
                continue
            self._flush_pack(w, run, v)
            run = []
            x = w.var("x")
            w.line(f"{x} = {v}.get({f.name!r}, {self._default_expr(w, f)})")
            self._encode_value(w, f.type, x, f.is_nullable(self.version))
        self._flush_pack(w, run, v)
        if self.flexible:
            self._encode_tagged(w, [f for f in fields if f.is_tagged(self.version)], v)

    def _flush_pack(self, w: _Writer, run: list[Field], v: str) -> None:
        if not run:
            return
        fmt = ">" + "".join(f.type.fmt for f in run)  # type: ignore[attr-defined]
        pack = w.const("P", struct.Struct(fmt).pack)
        args = ", ".join(f"{v}.get({f.name!r}, {self._default_expr(w, f)})" for f in run)
        w.line(f"out += {pack}({args})")

    def _put_length(self, w: _Writer, expr: str, classic: str) -> None:
        if self.flexible:
            w.line(f"out += uvarint({expr} + 1)")
        else:
            w.line(f"out += {classic}({expr})")

    def _put_null(self, w: _Writer, classic_null: str) -> None:
        w.line("out += b'\\x00'" if self.flexible else f"out += {classic_null}")

    def _encode_value(self, w: _Writer, t: Type, x: str, nullable: bool) -> None:
        if isinstance(t, Fixed):
            pack = w.const("P", struct.Struct(">" + t.fmt).pack)
            w.line(f"out += {pack}({x})")
            return
        if isinstance(t, Struct):
            if nullable:  # Kafka's nullable struct: an int8 marker, -1 null, 1 present
                w.line(f"if {x} is None:")
                w.line("    out += b'\\xff'")
                w.line("else:")
                w.line("    out += b'\\x01'")
                w.depth += 1
            self._encode_struct(w, t, x)
            if nullable:
                w.depth -= 1
            return
        w.line(f"if {x} is None:")
        w.depth += 1
        if nullable:
            self._put_null(w, "NULL16" if t is STRING else "NULL32")
        else:
            w.line(f"raise WireError('{t.name} is not nullable in this version')")
        w.depth -= 1
        w.line("else:")
        w.depth += 1
        if t is STRING:
            w.line(f"{x} = {x}.encode()")
            self._put_length(w, f"len({x})", "P16")
            w.line(f"out += {x}")
        elif isinstance(t, Variable) and t is not RECORDS:
            self._put_length(w, f"len({x})", "P32")
            w.line(f"out += {x}")
        elif t is RECORDS:
            n = w.var("n")
            w.line(f"{n} = records_length({x})")
            self._put_length(w, n, "P32")
            w.line(f"if {n} <= INLINE and type({x}) in INLINE_TYPES:")
            w.line(f"    out += {x}")
            w.line(f"elif {n}:")
            w.line("    parts.append(out)")
            w.line(f"    parts.append({x})")
            w.line("    out = bytearray()")
        elif isinstance(t, Array):
            self._put_length(w, f"len({x})", "P32")
            el = t.element
            if isinstance(el, Fixed) and el.fmt != "16s":
                w.line(f"out += _struct.pack('>' + str(len({x})) + {el.fmt!r}, *{x})")
            else:
                item = w.var("i")
                w.line(f"for {item} in {x}:")
                w.depth += 1
                if isinstance(el, Struct):
                    self._encode_struct(w, el, item)
                else:
                    self._encode_value(w, el, item, False)
                w.depth -= 1
        w.depth -= 1

    def _encode_tagged(self, w: _Writer, tagged: list[Field], v: str) -> None:
        if not tagged:
            w.line("out += b'\\x00'")
            return
        fields, outer = w.var("tf"), w.var("o")
        w.line(f"{fields} = []")
        for f in sorted(tagged, key=lambda f: f.tag or 0):
            x = w.var("x")
            default = self._default_expr(w, f)
            w.line(f"{x} = {v}.get({f.name!r}, {default})")
            w.line(f"if {x} != {default}:")
            w.depth += 1
            w.line(f"{outer}, out = out, bytearray()")
            self._encode_value(w, f.type, x, f.is_nullable(self.version))
            w.line(f"{fields}.append(({f.tag}, out))")
            w.line(f"out = {outer}")
            w.depth -= 1
        w.line(f"out += uvarint(len({fields}))")
        w.line(f"for tag, data in {fields}:")
        w.line("    out += uvarint(tag)")
        w.line("    out += uvarint(len(data))")
        w.line("    out += data")

    def build(self) -> dict[str, Any]:
        source = "\n\n".join(self.sources)
        code = compile(source, f"<{self.label}>", "exec")
        exec(code, self.ns)  # the source is generated from our own declarations
        self.ns["__source__"] = source
        return self.ns


def compile_decoder(st: Struct, version: int, flexible: bool, label: str) -> Decoder:
    """The decoder of ``st`` at ``version`` (see the module docstring)."""
    c = _Compiler(version, flexible, label)
    name = c.decoder(st)
    decoder: Decoder = c.build()[name]
    return decoder


def compile_encoder(st: Struct, version: int, flexible: bool, label: str) -> Encoder:
    """The encoder of ``st`` at ``version`` (see the module docstring)."""
    c = _Compiler(version, flexible, label)
    name = c.encoder(st)
    encoder: Encoder = c.build()[name]
    return encoder


def source_of(fn: Callable[..., Any]) -> str:
    """The generated source a compiled function came from (for debugging)."""
    return str(fn.__globals__.get("__source__", ""))
