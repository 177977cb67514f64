"""Topics: the name rules, topic ids and the (topic, partition) key every layer uses.

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

Topic ids are Kafka's (KIP-516): 16 random bytes the controller draws when it creates a
topic (:func:`new_topic_id`).  On the wire they are the protocol's ``uuid`` type
(:data:`ZERO_UUID` meaning "no id"); to people and in ``partition.metadata`` they are
Kafka's ``Uuid.toString()``: URL-safe base64 without the ``==`` padding (22 characters,
:func:`topic_id_str` / :func:`parse_topic_id`).  Kafka never hands out the zero UUID nor
its reserved ``METADATA_TOPIC_ID`` (``...01``, the id of ``__cluster_metadata``), and
nor does :func:`new_topic_id` (the OS's CSPRNG).

Costs: O(1) / O(name length).  Pure functions: any thread.
"""

from __future__ import annotations

import base64
import binascii
import os
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


# -- topic ids ---------------------------------------------------------------------------

ZERO_UUID = bytes(16)
METADATA_TOPIC_ID = bytes(15) + b"\x01"  # Kafka's Uuid.METADATA_TOPIC_ID
_RESERVED = (ZERO_UUID, METADATA_TOPIC_ID)


def new_topic_id() -> bytes:
    """A random topic id: 16 bytes from the OS's CSPRNG, never a reserved one."""
    while True:
        value = os.urandom(16)
        if value not in _RESERVED:
            return value


def topic_id_str(topic_id: bytes) -> str:
    """Kafka's text form: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> bytes:
    """The 16 bytes of a topic id's text form; anything else -> ValueError."""
    if len(text) != 22:
        raise ValueError(f"a topic id is 22 base64 characters, got {text!r}")
    try:
        value = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{text!r} is not a base64 topic id: {exc}") from None
    if len(value) != 16 or topic_id_str(value) != text:
        raise ValueError(f"{text!r} is not a base64 topic id")
    return value
