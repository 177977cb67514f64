"""Topics: the name rules and the (topic, partition) key every layer uses.

Name rules (Kafka's): 1-249 characters from ``[a-zA-Z0-9._-]``, not ``.``/``..``.  Shared by
the broker (to reject bad CreateTopics/Produce/Fetch requests with INVALID_TOPIC_EXCEPTION)
and the client (to fail fast before any request).

Internal topics (:data:`INTERNAL_TOPICS`, Kafka's names): ``__consumer_offsets`` (the
group coordinators' log) and ``__transaction_state`` (the transaction coordinators',
once transactions exist).  Only the brokers' coordinators write them: a client's
Produce or DeleteRecords to one, and a client's CreateTopics, DeleteTopics or
CreatePartitions naming one, are refused with INVALID_TOPIC_EXCEPTION (Kafka's
``Cannot append to internal topic``); clients may read them and, with the right ACLs,
change their configs.

:class:`TopicPartition` is the one key type of a partition, from the client API down to
storage's checkpoint files (a NamedTuple: a plain ``(topic, partition)`` tuple compares and
hashes equal to it).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from clients.protocol.errors import ErrorCode, MiniKafkaError

MAX_TOPIC_NAME_LENGTH = 249
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        """Kafka's spelling in messages: ``orders-0``."""
        return f"{self.topic}-{self.partition}"


class InvalidTopicError(MiniKafkaError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


def topic_name_error(name: object) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not isinstance(name, str):
        return f"topic name must be a string, got {type(name).__name__}"
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is {len(name)} characters, the limit is {MAX_TOPIC_NAME_LENGTH}"
    if not _LEGAL.match(name):
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


def validate_topic_name(name: object) -> str:
    reason = topic_name_error(name)
    if reason is not None:
        raise InvalidTopicError(reason)
    assert isinstance(name, str)
    return name


def internal_topic_refusal(name: str, what: str) -> InvalidTopicError | None:
    """The error a client gets for ``what`` (e.g. "append to") on ``name`` when it is an
    internal topic, else None."""
    if name not in INTERNAL_TOPICS:
        return None
    return InvalidTopicError(f"cannot {what} internal topic {name!r}: only the brokers' "
                             "coordinators write it")
