"""The consumer group protocol's member payloads: subscription and assignment bytes.

The group coordinator treats both as opaque bytes (JoinGroup ``protocols[].metadata``,
SyncGroup ``assignments[].assignment``); only consumers read them.  They are Kafka's own
``ConsumerProtocolSubscription`` and ``ConsumerProtocolAssignment`` (protocol type
``consumer``), so our consumers share groups with Kafka's clients (any of them may be
the leader) and Kafka's tools read our groups' members.  Each is an int16 version, then
the struct in Kafka's classic (non-flexible) encoding; versions only append fields, so a
reader decodes a newer version as the newest it knows and ignores trailing bytes.

Subscription (JoinGroup metadata); we write version 3::

    version            int16
    topics             [string]                  subscribed topics, sorted, unique
    user_data          nullable bytes            assignor-specific
    owned_partitions   [{topic string,           (v1+) partitions the member holds now
                         partitions [int32]}]    (sticky / cooperative assignors)
    generation_id      int32                     (v2+) generation of owned_partitions;
                                                 -1 when it owns nothing
    rack_id            nullable string           (v3+) null: we do not know our rack

Assignment (SyncGroup assignment), the same layout in every version (we write 0)::

    version              int16
    assigned_partitions  [{topic string, partitions [int32]}]
    user_data            nullable bytes

Topic partitions travel grouped by topic, partitions sorted, as Kafka does.  An empty
assignment (a member with nothing to do) may also travel as zero bytes: the coordinator
sends empty bytes to members the leader left out, so ``decode_assignment(b"")`` is the
empty assignment.

Garbage raises :class:`GroupProtocolError` (code INCONSISTENT_GROUP_PROTOCOL) naming the
field that is wrong; nothing else escapes the decoders.  Sizes are bounded by the frame
size of the carrying request (``max_frame_bytes``), and each decoder rejects more than
``MAX_TOPICS`` topics / ``MAX_PARTITIONS`` partitions.

Costs: encode and decode are O(topics + partitions) (the schema interpreter of
:mod:`clients.protocol.reference`, precise errors; a few per rebalance).  Thread
safety: pure functions and immutable values.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

from clients.protocol import reference
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.schema import BYTES, INT32, STRING, Array, Field, Struct
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
SUBSCRIPTION_VERSION = 3  # the newest ConsumerProtocolSubscription we know (and write)
ASSIGNMENT_VERSION = 0  # every ConsumerProtocolAssignment version has this layout
MAX_TOPICS = 100_000
MAX_PARTITIONS = 1_000_000

_TOPIC_PARTITIONS = Array(Struct(
    Field("topic", STRING),
    Field("partitions", Array(INT32)),
    label="TopicPartition",
))  # fmt: skip

SUBSCRIPTION = Struct(
    Field("topics", Array(STRING)),
    Field("user_data", BYTES, nullable="0+", default=None),
    Field("owned_partitions", _TOPIC_PARTITIONS, "1+"),
    Field("generation_id", INT32, "2+", default=-1),
    Field("rack_id", STRING, "3+", nullable="3+", default=None),
    label="ConsumerProtocolSubscription",
)

ASSIGNMENT = Struct(
    Field("assigned_partitions", _TOPIC_PARTITIONS),
    Field("user_data", BYTES, nullable="0+", default=None),
    label="ConsumerProtocolAssignment",
)
_VERSION = struct.Struct(">h")


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


def _group(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, set[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, set()).add(tp.partition)
    return [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]


def _encode(st: Struct, version: int, body: dict[str, Any]) -> bytes:
    try:
        return _VERSION.pack(version) + reference.encode(st, version, False, body)
    except reference.FieldError as e:
        raise GroupProtocolError(f"{st.label}: {e}") from None


def encode_subscription(subscription: Subscription) -> bytes:
    return _encode(SUBSCRIPTION, SUBSCRIPTION_VERSION, {
        "topics": sorted(set(subscription.topics)),
        "user_data": subscription.user_data,
        "owned_partitions": _group(subscription.owned_partitions),
        "generation_id": subscription.generation_id,
        "rack_id": None,
    })  # fmt: skip


def encode_assignment(assignment: Assignment) -> bytes:
    return _encode(ASSIGNMENT, ASSIGNMENT_VERSION, {
        "assigned_partitions": _group(assignment.partitions),
        "user_data": assignment.user_data,
    })  # fmt: skip


def _decode(st: Struct, newest: int, data: bytes | memoryview, what: str) -> dict[str, Any]:
    view = memoryview(data).cast("B")
    if len(view) < 2:
        raise GroupProtocolError(f"{what}: {len(view)} bytes, too short for its version")
    (version,) = _VERSION.unpack_from(view)
    if version < 0:
        raise GroupProtocolError(f"{what}: version must be >= 0, got {version}")
    try:  # a newer version appends fields: read what we know, ignore the rest
        body, _ = reference.decode(st, min(version, newest), False, view, 2)
    except reference.FieldError as e:
        raise GroupProtocolError(f"{what} v{version}: {e}") from None
    return body


def _partitions(entries: list[dict[str, Any]], what: str) -> tuple[TopicPartition, ...]:
    if len(entries) > MAX_TOPICS:
        raise GroupProtocolError(f"{what}: more than {MAX_TOPICS} topics")
    out: list[TopicPartition] = []
    for entry in entries:
        topic = entry["topic"]
        for p in entry["partitions"]:
            if p < 0:
                raise GroupProtocolError(f"{what}: bad partition {p} of topic {topic!r}")
            out.append(TopicPartition(topic, p))
        if len(out) > MAX_PARTITIONS:
            raise GroupProtocolError(f"{what}: more than {MAX_PARTITIONS} partitions")
    if len(set(out)) != len(out):
        raise GroupProtocolError(f"{what}: a partition is listed twice")
    return tuple(out)


def decode_subscription(data: bytes | memoryview) -> Subscription:
    what = "subscription"
    body = _decode(SUBSCRIPTION, SUBSCRIPTION_VERSION, data, what)
    topics = body["topics"]
    if len(topics) > MAX_TOPICS or not all(topics):
        raise GroupProtocolError(f"{what}: topics must be non-empty names, at most {MAX_TOPICS}")
    generation = body["generation_id"]
    if generation < -1:
        raise GroupProtocolError(f"{what}: generation_id must be >= -1, got {generation}")
    user_data = body["user_data"]
    return Subscription(tuple(sorted(set(topics))),
                        _partitions(body["owned_partitions"], f"{what} owned"),
                        None if user_data is None else bytes(user_data), generation)  # fmt: skip


def decode_assignment(data: bytes | memoryview) -> Assignment:
    if len(data) == 0:
        return Assignment(())
    what = "assignment"
    body = _decode(ASSIGNMENT, ASSIGNMENT_VERSION, data, what)
    user_data = body["user_data"]
    return Assignment(_partitions(body["assigned_partitions"], what),
                      None if user_data is None else bytes(user_data))  # fmt: skip
