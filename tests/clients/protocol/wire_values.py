"""Random message bodies drawn from our schema declarations (seeded, reproducible)."""

from __future__ import annotations

import random
from typing import Any

from clients.protocol.schema import BYTES, RECORDS, STRING, Array, Fixed, Struct, Type

OUR_TAGS_FROM = 1000  # tags of our own extras (Kafka clients skip them)


def random_body(st: Struct, version: int, rng: random.Random, *, ours: bool = True
                ) -> dict[str, Any]:
    """A body for ``st`` at ``version``; ``ours=False`` leaves out our extra tagged fields."""
    out: dict[str, Any] = {}
    for f in st.fields_at(version):
        if f.tag is not None and (rng.random() < 0.4 or (not ours and f.tag >= OUR_TAGS_FROM)):
            continue
        out[f.name] = random_value(f.type, version, f.is_nullable(version), rng, ours=ours)
    return out


def random_value(t: Type, version: int, nullable: bool, rng: random.Random, *, ours: bool
                 ) -> Any:
    if nullable and rng.random() < 0.2:
        return None
    if isinstance(t, Struct):
        return random_body(t, version, rng, ours=ours)
    if isinstance(t, Array):
        return [random_value(t.element, version, False, rng, ours=ours)
                for _ in range(rng.randint(0, 3))]
    if isinstance(t, Fixed):
        if t.name == "uuid":
            return rng.randbytes(16)
        if t.name == "bool":
            return rng.random() < 0.5
        if t.name == "float64":
            return rng.random()
        return rng.randint(int(t.low), int(t.high))
    if t is STRING:
        return "".join(rng.choice("ab-é中") for _ in range(rng.randint(0, 6)))
    if t is BYTES:
        return rng.randbytes(rng.randint(0, 6))
    if t is RECORDS:
        return rng.choice([b"", rng.randbytes(rng.randint(1, 40))])  # None: nullable, above
    raise TypeError(f"no generator for {t!r}")
