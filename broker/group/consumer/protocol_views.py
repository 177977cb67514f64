"""A KIP-848 consumer group as the classic DescribeGroups shows it (Kafka's
``ConsumerGroup.asDescribedGroup``): each member's subscription and assignment encoded as
the classic consumer protocol's ``ConsumerProtocolSubscription`` v0 (int16 version,
``topics [string]``, null user data) and ``ConsumerProtocolAssignment`` v0 (int16
version, ``[topic, partitions [int32]]``, null user data), topics by name (a topic
whose id is no longer known is left out).

Costs: O(members x assigned partitions).  Pure: thread-safe.
"""

from __future__ import annotations

import struct

from broker.group.consumer.assignors import Assignment
from broker.group.consumer.group import ConsumerGroup, TopicsView
from clients.protocol.message_types import DescribeGroupsResponseMember

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
NULL_BYTES = _I32.pack(-1)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def subscription_v0(topics: list[str]) -> bytes:
    return b"".join([_I16.pack(0), _I32.pack(len(topics)), *map(_string, topics),
                     NULL_BYTES])


def assignment_v0(assignment: Assignment, names: dict[bytes, str]) -> bytes:
    entries = sorted((names[t], sorted(ps)) for t, ps in assignment.items() if t in names)
    out = [_I16.pack(0), _I32.pack(len(entries))]
    for name, partitions in entries:
        out += [_string(name), _I32.pack(len(partitions)),
                struct.pack(f">{len(partitions)}i", *partitions)]
    out.append(NULL_BYTES)
    return b"".join(out)


def described_members(group: ConsumerGroup,
                      topics: TopicsView) -> list[DescribeGroupsResponseMember]:
    names = {topic_id: name for name, (topic_id, _) in topics.items()}
    out: list[DescribeGroupsResponseMember] = []
    for m in group.members.values():
        subscribed = sorted(names[t] for t in group.member_topics(m, topics))
        out.append({"member_id": m.member_id, "group_instance_id": m.instance_id,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "member_metadata": subscription_v0(subscribed),
                    "member_assignment": assignment_v0(m.assignment.assigned, names)})
    return out
