"""Records of KIP-848 consumer groups in the offsets topic (``__consumer_offsets``).

Kafka's record types, with Kafka's key version numbers (the int16 a key starts with says
what it is about, as the classic records' 1 and 2 in :mod:`broker.group.metadata`), in
our encoding style: an int16 version, then a msgpack array of the fields in order
(deterministic bytes, so compaction by key works); a value's version is 0 and readers
ignore trailing fields they do not know.  A null value is a tombstone.

Keys (key version: Kafka's record, the key's fields) and values (fields):

- 3 ConsumerGroupMetadata ``[group_id]``: ``[group_epoch]``;
- 5 ConsumerGroupMemberMetadata ``[group_id, member_id]``: ``[instance_id/nil,
  rack_id/nil, client_id, client_host, [subscribed topic names], regex/nil,
  server_assignor/nil, rebalance_timeout_ms(, classic)]``, ``classic`` only for a
  member speaking the classic protocol: ``[session_timeout_ms, [[protocol name, metadata
  (bin)], ...]]`` (Kafka's ClassicMemberMetadata; absent in records written before it);
- 6 ConsumerGroupTargetAssignmentMetadata ``[group_id]``: ``[assignment_epoch,
  assignor name]``;
- 7 ConsumerGroupTargetAssignmentMember ``[group_id, member_id]``: ``[assignment]``;
- 8 ConsumerGroupCurrentMemberAssignment ``[group_id, member_id]``: ``[member_epoch,
  previous_member_epoch, state name, assigned, revoking]``.

An assignment is ``[[topic id (16-byte bin), [partition int]], ...]`` sorted by topic id.
Kafka's key 4 (ConsumerGroupPartitionMetadata, the subscribed topics' metadata) is not
written: after a load the first heartbeat sees the topics afresh, which bumps the group
epoch once and recomputes the target (sticky, so nothing moves that need not).

:func:`group_records` gives the records that bring the log from one state of a group to
the next; :class:`GroupLoader` applies records in log order and builds the groups.
Anything that does not decode raises :class:`~broker.group.metadata.GroupRecordError`
(the load skips such a record and counts it).

Costs: a member's records O(its partitions); a target record O(the group's partitions).
Pure: thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from broker.group.consumer.assignors import Assignment, TopicId
from broker.group.consumer.group import ConsumerGroup
from broker.group.consumer.member import (
    ClassicMemberMetadata,
    ConsumerGroupMember,
    MemberAssignment,
    ReconciliationState,
)
from broker.group.metadata import GroupRecordError

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
KEY_VERSIONS = frozenset({GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER,
                          CURRENT_ASSIGNMENT})
VALUE_VERSION = 0
_VERSION = struct.Struct(">h")
Record = tuple[bytes, bytes | None]


def _pack(version: int, fields: Sequence[Any]) -> bytes:
    return _VERSION.pack(version) + msgpack.packb(list(fields), use_bin_type=True)


def _unpack(data: bytes, what: str) -> tuple[int, list[Any]]:
    if len(data) < 2:
        raise GroupRecordError(f"{what}: {len(data)} bytes, no version")
    try:
        fields = msgpack.unpackb(data[2:], raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise GroupRecordError(f"{what}: not msgpack ({exc})") from None
    if not isinstance(fields, list):
        raise GroupRecordError(f"{what}: not an array")
    return _VERSION.unpack_from(data)[0], fields


def key_version(key: bytes) -> int:
    """Which record a key is (-1: too short to say)."""
    return _VERSION.unpack_from(key)[0] if len(key) >= 2 else -1


def _assignment(a: Assignment) -> list[list[Any]]:
    return [[t, sorted(ps)] for t, ps in sorted(a.items()) if ps]


def _read_assignment(value: Any, what: str) -> Assignment:
    if not isinstance(value, list):
        raise GroupRecordError(f"{what}: assignment is not an array")
    out: dict[TopicId, frozenset[int]] = {}
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], bytes)
                and len(entry[0]) == 16 and isinstance(entry[1], list)
                and all(isinstance(p, int) and 0 <= p < 2**31 for p in entry[1])):
            raise GroupRecordError(f"{what}: bad assignment entry {entry!r:.80}")
        out[entry[0]] = frozenset(entry[1])
    return out


def _field(fields: list[Any], index: int, kinds: tuple[type, ...], what: str) -> Any:
    if index >= len(fields) or not isinstance(fields[index], kinds):
        found = fields[index] if index < len(fields) else "nothing"
        raise GroupRecordError(f"{what}: field {index}: {found!r:.60}")
    return fields[index]


# -- writing -----------------------------------------------------------------------------

def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    return _pack(version, [group_id] if member_id is None else [group_id, member_id])


def member_metadata_value(m: ConsumerGroupMember) -> bytes:
    fields: list[Any] = [m.instance_id, m.rack_id, m.client_id, m.client_host,
                         list(m.subscribed_topic_names), m.subscribed_topic_regex,
                         m.server_assignor, m.rebalance_timeout_ms]
    if m.classic is not None:
        fields.append([m.classic.session_timeout_ms,
                       [[name, data] for name, data in m.classic.protocols]])
    return _pack(VALUE_VERSION, fields)


def _read_classic(fields: list[Any], what: str) -> ClassicMemberMetadata | None:
    value = fields[8] if len(fields) > 8 else None
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
            and isinstance(value[1], list) and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                and isinstance(p[1], bytes) for p in value[1])):
        raise GroupRecordError(f"{what}: bad classic member metadata {value!r:.60}")
    return ClassicMemberMetadata(value[0], tuple((p[0], p[1]) for p in value[1]))


def current_assignment_value(a: MemberAssignment) -> bytes:
    return _pack(VALUE_VERSION, [a.member_epoch, a.previous_member_epoch, a.state.value,
                                 _assignment(a.assigned), _assignment(a.revoking)])


@dataclass(frozen=True)
class GroupSnapshot:
    """What the log holds of a group: compared with the group after a change."""

    group_epoch: int
    assignment_epoch: int
    members: dict[str, bytes]  # member id -> its member metadata value
    targets: dict[str, Assignment]
    assignments: dict[str, MemberAssignment]

    @classmethod
    def of(cls, group: ConsumerGroup | None) -> GroupSnapshot:
        if group is None:
            return cls(-1, -1, {}, {}, {})
        return cls(group.group_epoch, group.assignment_epoch,
                   {m.member_id: member_metadata_value(m) for m in group.members.values()},
                   dict(group.target),
                   {m.member_id: m.assignment for m in group.members.values()})


def group_records(group_id: str, before: GroupSnapshot, after: GroupSnapshot,
                  assignor: str) -> list[Record]:
    """The records that take the log from ``before`` to ``after`` (an empty ``after``
    with group epoch -1: the group is deleted, every record gets its tombstone)."""
    out: list[Record] = []
    for member_id in before.members.keys() - after.members.keys():
        out += [(_key(MEMBER_METADATA, group_id, member_id), None),
                (_key(CURRENT_ASSIGNMENT, group_id, member_id), None)]
    for member_id, value in after.members.items():
        if before.members.get(member_id) != value:
            out.append((_key(MEMBER_METADATA, group_id, member_id), value))
    for member_id in before.targets.keys() - after.targets.keys():
        out.append((_key(TARGET_MEMBER, group_id, member_id), None))
    for member_id, target in after.targets.items():
        if before.targets.get(member_id) != target:
            out.append((_key(TARGET_MEMBER, group_id, member_id),
                        _pack(VALUE_VERSION, [_assignment(target)])))
    if after.assignment_epoch != before.assignment_epoch:
        out.append((_key(TARGET_METADATA, group_id), None if after.assignment_epoch < 0
                    else _pack(VALUE_VERSION, [after.assignment_epoch, assignor])))
    for member_id, assignment in after.assignments.items():
        if before.assignments.get(member_id) != assignment:
            out.append((_key(CURRENT_ASSIGNMENT, group_id, member_id),
                        current_assignment_value(assignment)))
    if after.group_epoch != before.group_epoch:
        out.append((_key(GROUP_METADATA, group_id), None if after.group_epoch < 0
                    else _pack(VALUE_VERSION, [after.group_epoch])))
    return out


# -- loading -----------------------------------------------------------------------------

class GroupLoader:
    """The consumer groups of one offsets partition, built from its records in log order."""

    def __init__(self, partition: int, max_size: int) -> None:
        self.partition = partition
        self.max_size = max_size
        self.groups: dict[str, ConsumerGroup] = {}

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id, self.partition,
                                                          self.max_size)
        return group

    def apply(self, key: bytes, value: bytes | None) -> None:
        version, kf = _unpack(key, "consumer group key")
        what = f"consumer group record {version}"
        group_id = _field(kf, 0, (str,), what)
        member_id = _field(kf, 1, (str,), what) if version in (
            MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT) else ""
        if value is None:
            self._tombstone(version, group_id, member_id)
            return
        _, f = _unpack(value, what)
        group = self._group(group_id)
        if version == GROUP_METADATA:
            group.group_epoch = _field(f, 0, (int,), what)
        elif version == TARGET_METADATA:
            group.assignment_epoch = _field(f, 0, (int,), what)
            group.assignor_name = _field(f, 1, (str,), what)
        elif version == TARGET_MEMBER:
            group.target[member_id] = _read_assignment(_field(f, 0, (list,), what), what)
        elif version == MEMBER_METADATA:
            m = group.members.get(member_id) or ConsumerGroupMember(member_id)
            m.instance_id = _field(f, 0, (str, type(None)), what)
            m.rack_id = _field(f, 1, (str, type(None)), what)
            m.client_id = _field(f, 2, (str,), what)
            m.client_host = _field(f, 3, (str,), what)
            names = _field(f, 4, (list,), what)
            if not all(isinstance(n, str) for n in names):
                raise GroupRecordError(f"{what}: topic names are not strings")
            m.subscribed_topic_names = tuple(names)
            m.subscribed_topic_regex = _field(f, 5, (str, type(None)), what)
            m.server_assignor = _field(f, 6, (str, type(None)), what)
            m.rebalance_timeout_ms = _field(f, 7, (int,), what)
            m.classic = _read_classic(f, what)
            group.members[member_id] = m
        elif version == CURRENT_ASSIGNMENT:
            m = group.members.get(member_id) or ConsumerGroupMember(member_id)
            try:
                state = ReconciliationState(_field(f, 2, (str,), what))
            except ValueError:
                raise GroupRecordError(f"{what}: unknown state {f[2]!r:.40}") from None
            m.assignment = MemberAssignment(
                _field(f, 0, (int,), what), _field(f, 1, (int,), what), state,
                _read_assignment(_field(f, 3, (list,), what), what),
                _read_assignment(_field(f, 4, (list,), what), what))
            group.members[member_id] = m
        else:
            raise GroupRecordError(f"{what}: not a consumer group record")

    def _tombstone(self, version: int, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if version in (MEMBER_METADATA, CURRENT_ASSIGNMENT):
            group.members.pop(member_id, None)
        elif version == TARGET_MEMBER:
            group.target.pop(member_id, None)
        elif version == GROUP_METADATA:
            del self.groups[group_id]

    def finish(self) -> list[ConsumerGroup]:
        """The loaded groups, their partition owners rebuilt from the assignments."""
        for group in self.groups.values():
            group.owners = {tp: m.member_id for m in group.members.values()
                            for tp in m.assignment.partitions()}
            group.static_members = {m.instance_id: m.member_id for m in group.members.values()
                                    if m.instance_id is not None}
        return list(self.groups.values())
