"""Hypothesis strategies derived from our schema declarations (clients.protocol.schema).

``body_strategy(struct, version)`` draws a random valid body for one API version: every
field of the version present (tagged fields sometimes left at their default), values
within the type's range, records as random bytes.  Sizes stay small so round trips are
fast.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from clients.protocol.schema import BYTES, RECORDS, STRING, Array, Fixed, Struct, Type

MAX_ITEMS = 3


def type_strategy(t: Type, version: int, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(t, Struct):
        inner: st.SearchStrategy[Any] = body_strategy(t, version)
    elif isinstance(t, Array):
        inner = st.lists(type_strategy(t.element, version, False), max_size=MAX_ITEMS)
    elif isinstance(t, Fixed):
        if t.name == "uuid":
            inner = st.binary(min_size=16, max_size=16)
        elif t.name == "bool":
            inner = st.booleans()
        elif t.name == "float64":
            inner = st.floats(allow_nan=False)
        else:
            lo, hi = int(t.low), int(t.high)
            inner = st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]),
                              st.integers(lo, hi))
    elif t is STRING:
        inner = st.text(max_size=12)
    elif t is BYTES:
        inner = st.binary(max_size=16)
    elif t is RECORDS:
        inner = st.binary(max_size=64)
    else:
        raise TypeError(f"no strategy for {t!r}")
    return st.one_of(st.none(), inner) if nullable else inner


def body_strategy(struct: Struct, version: int) -> st.SearchStrategy[dict[str, Any]]:
    required = {}
    optional = {}
    for f in struct.fields_at(version):
        strategy = type_strategy(f.type, version, f.is_nullable(version))
        if f.tag is not None:
            optional[f.name] = strategy
        else:
            required[f.name] = strategy
    return st.fixed_dictionaries(required, optional=optional)
