"""The classic consumer protocol's member bytes as the coordinator reads them: a classic
member's JoinGroup metadata (``ConsumerProtocolSubscription``) and its SyncGroup
assignment (``ConsumerProtocolAssignment``), decoded to topic ids.

The coordinator of a classic group treats these bytes as opaque; it reads them only
when the members of a classic group move into a KIP-848 consumer group (Kafka's online
upgrade, :mod:`~broker.group.consumer.migration`) or when a classic member is served by
a consumer group (:mod:`~broker.group.consumer.classic_members`).  Layouts (Kafka's;
every version is an int16 version then the struct in the classic non-flexible
encoding, later versions only append fields, so a newer version is read as the newest
known here)::

    subscription   topics [string], user_data nullable bytes,
                   (v1+) owned_partitions [{topic string, partitions [int32]}], ...
    assignment     assigned_partitions [{topic string, partitions [int32]}],
                   user_data nullable bytes

Topics are named on the wire; :func:`subscription_of` and :func:`assignment_of` map them
to ids with the cluster's topics (a topic not known there is left out: it cannot be
assigned).  Anything that does not decode raises :class:`ClassicProtocolError` (its
caller answers INCONSISTENT_GROUP_PROTOCOL, or refuses the conversion); a negative
partition, more than ``MAX_TOPICS`` topics or ``MAX_PARTITIONS`` partitions too (the
bytes are bounded by the request frame and the group's metadata bounds anyway).

The client side of these layouts is :mod:`clients.consumer.group_protocol` (a broker may
not import it: the layering allows only the client foundations); the encoding of a
consumer group's members for DescribeGroups is :mod:`~broker.group.consumer.
protocol_views`.

Costs: O(bytes).  Pure: thread-safe.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from broker.group.consumer.assignors import Assignment, TopicId
from broker.group.consumer.group import TopicsView
from clients.protocol import reference
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.schema import BYTES, INT32, STRING, Array, Field, Struct

MAX_TOPICS = 100_000
MAX_PARTITIONS = 1_000_000
_VERSION = struct.Struct(">h")
_TOPIC_PARTITIONS = Array(Struct(Field("topic", STRING), Field("partitions", Array(INT32)),
                                 label="TopicPartition"))
_SUBSCRIPTION_NEWEST = 1  # what is read here: topics and owned partitions
_SUBSCRIPTION = Struct(
    Field("topics", Array(STRING)),
    Field("user_data", BYTES, nullable="0+", default=None),
    Field("owned_partitions", _TOPIC_PARTITIONS, "1+"),
    label="ConsumerProtocolSubscription")
_ASSIGNMENT = Struct(
    Field("assigned_partitions", _TOPIC_PARTITIONS),
    Field("user_data", BYTES, nullable="0+", default=None),
    label="ConsumerProtocolAssignment")


class ClassicProtocolError(MiniKafkaError):
    """Member bytes that do not decode."""

    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL


@dataclass(frozen=True)
class ClassicSubscription:
    """What a classic member's JoinGroup metadata says, topics resolved to ids."""

    topics: tuple[str, ...]  # subscribed topic names, sorted, unique
    owned: Assignment  # (v1+) the partitions it holds now; eager members: none


def _decode(st: Struct, newest: int, data: bytes, what: str) -> dict[str, Any]:
    if len(data) < _VERSION.size:
        raise ClassicProtocolError(f"{what}: {len(data)} bytes, too short for its version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ClassicProtocolError(f"{what}: version {version} is negative")
    try:
        body, _ = reference.decode(st, min(version, newest), False, data, _VERSION.size)
    except reference.FieldError as exc:
        raise ClassicProtocolError(f"{what} v{version}: {exc}") from None
    return body


def _by_id(entries: list[dict[str, Any]], topics: TopicsView, what: str) -> Assignment:
    if len(entries) > MAX_TOPICS:
        raise ClassicProtocolError(f"{what}: more than {MAX_TOPICS} topics")
    out: dict[TopicId, frozenset[int]] = {}
    count = 0
    for entry in entries:
        partitions = entry["partitions"]
        count += len(partitions)
        if count > MAX_PARTITIONS or any(p < 0 for p in partitions):
            raise ClassicProtocolError(f"{what}: a negative partition or more than "
                                       f"{MAX_PARTITIONS} partitions")
        known = topics.get(entry["topic"])
        if known is not None and partitions:
            out[known[0]] = out.get(known[0], frozenset()) | frozenset(partitions)
    return out


def subscription_of(metadata: bytes, topics: TopicsView) -> ClassicSubscription:
    """A member's ``ConsumerProtocolSubscription`` (raises :class:`ClassicProtocolError`)."""
    body = _decode(_SUBSCRIPTION, _SUBSCRIPTION_NEWEST, metadata, "subscription")
    names = body["topics"]
    if len(names) > MAX_TOPICS or not all(names):
        raise ClassicProtocolError(f"subscription: topics must be non-empty names, at most "
                                   f"{MAX_TOPICS}")
    owned = _by_id(body.get("owned_partitions") or [], topics, "subscription owned")
    return ClassicSubscription(tuple(sorted(set(names))), owned)


def assignment_of(data: bytes, topics: TopicsView) -> Assignment:
    """A member's ``ConsumerProtocolAssignment`` (empty bytes: nothing assigned)."""
    if not data:
        return {}
    body = _decode(_ASSIGNMENT, 0, data, "assignment")
    return _by_id(body["assigned_partitions"], topics, "assignment")
