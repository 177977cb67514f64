"""Hypothesis strategies derived from the protocol schemas (clients.protocol.schema).

``body_strategy(struct, version)`` draws a random valid body for one API version: every
wire field present, values within the type's range, Records as random bytes.  Sizes are
kept small so a round-trip test stays fast.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from clients.protocol.schema import Struct
from clients.protocol.wire_types import Array, Bool, Bytes, Map, Records, Str, Type, _Int

MAX_ITEMS = 3
_TEXT = st.text(max_size=12)


def type_strategy(t: Type, version: int) -> st.SearchStrategy[Any]:
    if isinstance(t, _Int):
        edges = st.sampled_from([t.lo, t.hi, 0, -1])
        return st.one_of(edges, st.integers(t.lo, t.hi))
    if isinstance(t, Bool):
        return st.booleans()
    if isinstance(t, Str):
        s = st.text(max_size=min(t.max_length, 12))
        return st.one_of(st.none(), s) if t.nullable else s
    if isinstance(t, Bytes):
        b = st.binary(max_size=min(t.max_length, 16))
        return st.one_of(st.none(), b) if t.nullable else b
    if isinstance(t, Records):
        return st.binary(max_size=64)
    if isinstance(t, Array):
        items = st.lists(type_strategy(t.of, version), max_size=min(t.max_items, MAX_ITEMS))
        return st.one_of(st.none(), items) if t.nullable else items
    if isinstance(t, Map):
        return st.dictionaries(
            type_strategy(t.key, version), type_strategy(t.value, version), max_size=MAX_ITEMS
        )
    if isinstance(t, Struct):
        return body_strategy(t, version)
    raise TypeError(f"no strategy for {t!r}")


def body_strategy(struct: Struct, version: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {name: type_strategy(struct.types[name], version) for name in struct.wire_fields(version)}
    )
