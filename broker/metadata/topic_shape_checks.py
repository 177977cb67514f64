"""A topic's shape checked the way Kafka checks it, with Kafka's codes and words: the
partition count of CreateTopics, the new total of CreatePartitions and the replication
factor, shared by the controller and a standalone broker.

Each function returns the error to answer (a :class:`MiniKafkaError` carrying
INVALID_PARTITIONS or INVALID_REPLICATION_FACTOR) or None; callers wrap it in their own
rejection type.  Messages are Kafka's (``Number of partitions was set to an invalid
non-positive value.``, ``Topic currently has 3 partitions, which is higher than the
requested 2.``, ``Replication factor must be larger than 0, ...``, ``Unable to replicate
the partition 4 time(s): The target replication factor of 4 cannot be reached because
only 3 broker(s) are registered ...``); the cap on partitions per topic is ours
(``max_partitions_per_topic``), Kafka has none.

Pure functions, O(1), thread-safe.
"""

from __future__ import annotations

from clients.protocol.errors import ErrorCode, MiniKafkaError


def _partitions(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, ErrorCode.INVALID_PARTITIONS)


def partition_count_error(count: int, maximum: int) -> MiniKafkaError | None:
    """CreateTopics' partition count (the default already put in for -1)."""
    if count < 1:
        return _partitions("Number of partitions was set to an invalid non-positive value.")
    if count > maximum:
        return _partitions(f"Number of partitions {count} is more than "
                           f"max.partitions.per.topic ({maximum}).")
    return None


def partition_increase_error(current: int, requested: int,
                             maximum: int) -> MiniKafkaError | None:
    """CreatePartitions' new total for a topic with ``current`` partitions."""
    if requested < current:
        return _partitions(f"Topic currently has {current} partitions, which is higher than "
                           f"the requested {requested}.")
    if requested == current:
        return _partitions(f"Topic already has {current} partitions.")
    return partition_count_error(requested, maximum)


def replication_factor_error(factor: int, brokers: int,
                             which: str = "registered and unfenced") -> MiniKafkaError | None:
    """A replication factor (the default already put in for -1) for ``brokers`` brokers
    that can take replicas (``which`` says what counted them)."""
    if factor < 1:
        return MiniKafkaError("Replication factor must be larger than 0, or -1 to use the "
                              "default value.", ErrorCode.INVALID_REPLICATION_FACTOR)
    if factor > brokers:
        return MiniKafkaError(f"Unable to replicate the partition {factor} time(s): The "
                              f"target replication factor of {factor} cannot be reached "
                              f"because only {brokers} broker(s) are {which}.",
                              ErrorCode.INVALID_REPLICATION_FACTOR)
    return None
