"""ListOffsets' special timestamps (Kafka's ``OffsetSpec``), shared by the consumer, the
broker's handler and the replica fetcher.

A ListOffsets partition entry asks for the offset of the first record with a timestamp
>= ``timestamp``, or, with one of these negative values: the log end (-1; for a consumer
the high watermark), the log start (-2), or the record with the largest timestamp (-3);
from v8 the local log start (-4, KIP-405: the log start, without tiered storage) and from
v9 the last offset in tiered storage (-5, KIP-1005: none here, offset -1).
"""

from __future__ import annotations

__all__ = ["EARLIEST_LOCAL_TIMESTAMP", "EARLIEST_TIMESTAMP", "LATEST_TIERED_TIMESTAMP",
           "LATEST_TIMESTAMP", "MAX_TIMESTAMP"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # ListOffsets v8+
LATEST_TIERED_TIMESTAMP = -5  # ListOffsets v9+
