"""Where a coordinator's key lives: Kafka's placement of group ids and transactional ids.

A group id (in ``__consumer_offsets``) or a transactional id (in ``__transaction_state``)
is stored in, and coordinated by the leader of, partition
``Utils.abs(javaStringHash(key)) % partitions`` (Kafka's formula), so a key lands on the
same partition number as in Kafka and a client's FindCoordinator finds the same broker
role.

Costs: O(len(key)) (the key's UTF-16 code units).  Pure; thread-safe.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed int32."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's choice: ``Utils.abs(key.hashCode) % partitions``."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
