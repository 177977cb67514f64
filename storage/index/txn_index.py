"""STAND-IN (txpart) for txstore's ``.txnindex`` (contract 2 of issue 32): the entry type
only; reverted when txstore's module lands."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["AbortedTxn"]


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
