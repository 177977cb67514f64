"""The consumer group protocol's member payloads: subscription and assignment bytes.

The group coordinator treats both as opaque bytes (JoinGroup ``protocols[].metadata``,
SyncGroup ``assignments[].assignment``); only consumers read them.  Both are one
msgpack array whose first element is the format version, so a newer consumer can add
trailing fields: a decoder reads the fields it knows and ignores extra trailing ones
(Kafka's "newer versions append fields" rule).  Topic partitions travel grouped by
topic, partitions sorted, as Kafka does.

Subscription (JoinGroup metadata), version 0::

    | # | field            | msgpack type             | meaning                           |
    |---|------------------|--------------------------|-----------------------------------|
    | 0 | version          | int (0)                  | format version                    |
    | 1 | topics           | array of str             | subscribed topics, sorted, unique |
    | 2 | owned_partitions | array of [str, [int...]] | partitions the member holds now   |
    |   |                  |                          | (for sticky/cooperative assignors)|
    | 3 | user_data        | bin or nil               | assignor-specific bytes           |
    | 4 | generation_id    | int                      | generation of owned_partitions,   |
    |   |                  |                          | -1 when it owns nothing           |

Assignment (SyncGroup assignment), version 0::

    | # | field            | msgpack type             | meaning                           |
    |---|------------------|--------------------------|-----------------------------------|
    | 0 | version          | int (0)                  | format version                    |
    | 1 | partitions       | array of [str, [int...]] | assigned partitions by topic      |
    | 2 | user_data        | bin or nil               | assignor-specific bytes           |

An empty assignment (a member with nothing to do) may also travel as zero bytes: the
coordinator sends empty bytes to members the leader left out, so ``decode_assignment(b"")``
is the empty assignment.

Garbage raises :class:`GroupProtocolError` (code INCONSISTENT_GROUP_PROTOCOL) naming the
field that is wrong; nothing else escapes the decoders.  Sizes are bounded by the frame
size of the carrying request (``max_frame_bytes``), and each decoder rejects more than
``MAX_TOPICS`` topics / ``MAX_PARTITIONS`` partitions.

Costs: encode and decode are O(topics + partitions).  Thread safety: pure functions and
immutable values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import msgpack

from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition

__all__ = [
    "PROTOCOL_TYPE",
    "Assignment",
    "GroupProtocolError",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

PROTOCOL_TYPE = "consumer"
VERSION = 0
MAX_TOPICS = 100_000
MAX_PARTITIONS = 1_000_000


class GroupProtocolError(MiniKafkaError):
    """Subscription or assignment bytes that do not decode."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


class Subscription(NamedTuple):
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    user_data: bytes | None = None
    generation_id: int = -1


class Assignment(NamedTuple):
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def _group(partitions: Iterable[TopicPartition]) -> list[list[Any]]:
    by_topic: dict[str, set[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, set()).add(tp.partition)
    return [[t, sorted(ps)] for t, ps in sorted(by_topic.items())]


def encode_subscription(subscription: Subscription) -> bytes:
    topics = sorted(set(subscription.topics))
    return msgpack.packb([VERSION, topics, _group(subscription.owned_partitions),
                          subscription.user_data, subscription.generation_id])  # fmt: skip


def encode_assignment(assignment: Assignment) -> bytes:
    return msgpack.packb([VERSION, _group(assignment.partitions), assignment.user_data])


def _unpack(data: bytes | memoryview, what: str, fields: int) -> list[Any]:
    try:
        value = msgpack.unpackb(bytes(data), raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise GroupProtocolError(f"{what}: not msgpack ({type(e).__name__}: {e})") from None
    if not isinstance(value, list) or len(value) < fields:
        raise GroupProtocolError(
            f"{what}: expected an array of at least {fields} fields, got {type(value).__name__}"
            + (f" of {len(value)}" if isinstance(value, list) else "")
        )
    version = value[0]
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise GroupProtocolError(f"{what}: version must be an int >= 0, got {version!r}")
    return value


def _partitions(value: Any, what: str) -> tuple[TopicPartition, ...]:
    if not isinstance(value, list) or len(value) > MAX_TOPICS:
        raise GroupProtocolError(f"{what}: expected an array of [topic, [partitions]]")
    out: list[TopicPartition] = []
    for entry in value:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or not isinstance(entry[1], list)):  # fmt: skip
            raise GroupProtocolError(f"{what}: bad entry {entry!r:.80}, want [topic, [int...]]")
        topic, parts = entry
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise GroupProtocolError(f"{what}: bad partition {p!r:.40} of topic {topic!r}")
            out.append(TopicPartition(topic, p))
        if len(out) > MAX_PARTITIONS:
            raise GroupProtocolError(f"{what}: more than {MAX_PARTITIONS} partitions")
    if len(set(out)) != len(out):
        raise GroupProtocolError(f"{what}: a partition is listed twice")
    return tuple(out)


def _user_data(value: Any, what: str) -> bytes | None:
    if value is not None and not isinstance(value, bytes):
        raise GroupProtocolError(
            f"{what}: user_data must be bin or nil, got {type(value).__name__}"
        )
    return value


def decode_subscription(data: bytes | memoryview) -> Subscription:
    what = "subscription"
    value = _unpack(data, what, 5)
    topics = value[1]
    if (not isinstance(topics, list) or len(topics) > MAX_TOPICS
            or not all(isinstance(t, str) and t for t in topics)):  # fmt: skip
        raise GroupProtocolError(f"{what}: topics must be an array of non-empty str")
    generation = value[4]
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < -1:
        raise GroupProtocolError(f"{what}: generation_id must be an int >= -1, got {generation!r}")
    return Subscription(tuple(sorted(set(topics))), _partitions(value[2], f"{what} owned"),
                        _user_data(value[3], what), generation)  # fmt: skip


def decode_assignment(data: bytes | memoryview) -> Assignment:
    if len(data) == 0:
        return Assignment(())
    what = "assignment"
    value = _unpack(data, what, 3)
    return Assignment(_partitions(value[1], what), _user_data(value[2], what))
