"""Topics: the name rules and the (topic, partition) key every layer uses.

Name rules (Kafka's): 1-249 characters from ``[a-zA-Z0-9._-]``, not ``.``/``..``.  Shared by
the broker (to reject bad CreateTopics/Produce/Fetch requests with INVALID_TOPIC_EXCEPTION)
and the client (to fail fast before any request).

:class:`TopicPartition` is the one key type of a partition, from the client API down to
storage's checkpoint files (a NamedTuple: a plain ``(topic, partition)`` tuple compares and
hashes equal to it).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from clients.protocol.errors import ErrorCode, MiniKafkaError

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


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
