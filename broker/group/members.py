"""One consumer group in the coordinator's memory: members, generation, offsets.

:class:`GroupMember` is one member as the coordinator sees it: its ids, timeouts, the
protocols it supports (name -> opaque metadata, in preference order), its assignment
(opaque bytes from the leader), the parked JoinGroup/SyncGroup answer it waits for, and
its heartbeat deadline.  :class:`Group` holds the members, the state (see
:mod:`broker.group.state`), the generation, the chosen protocol and leader, the
committed offsets (with the log position of each, so only a commit later in the log
replaces one: :meth:`Group.apply_offset`), the commits being written, the pending
transactional offsets (:mod:`broker.group.txn_offsets`), and the static-membership map
``group_instance_id -> member_id``.

Protocol selection (Kafka's vote): candidates are the protocols every member supports;
each member votes for the first candidate in its own preference list; the candidate
with the most votes wins, ties broken by name so every coordinator picks the same.

Subscriptions (:meth:`Group.subscribed_topics`, Kafka's ``computeSubscribedTopics``):
of a group of protocol type ``consumer`` with members and a chosen protocol, the union
of the topics in each member's metadata for that protocol, read as the version-0 prefix
of ``ConsumerProtocolSubscription`` (int16 version, then ``topics [string]``: every
version starts so); None when the group is of another type, has no members or no
protocol yet, or a member's metadata does not decode (then the caller must assume every
topic is subscribed, as Kafka does).

Memory bounds: :meth:`GroupMember.footprint_bytes` is what a member holds that a client
chose (its protocols' names and metadata, its ids, client id and host, its assignment);
:attr:`Group.footprint_bytes` is the sum over the members, kept up to date by every change
of members, protocols and assignments made through the group's methods.  The
coordinator bounds both (:mod:`broker.group.footprint`)
so the leader's JoinGroup answer and the group's record always fit in one frame.

Costs: selection O(members x protocols); ``all_joined`` O(members);
``subscribed_topics`` O(the members' metadata bytes of the chosen protocol);
``has_pending_commit`` as :mod:`broker.group.txn_offsets` says; the rest O(1) (a
member's footprint O(its protocols)).
Not thread-safe: owned by the coordinator (the broker's event loop).
"""

from __future__ import annotations

import struct
from collections import Counter

from broker.group.metadata import GroupMetadataValue, MemberMetadata, OffsetCommitValue
from broker.group.state import GroupEvent, GroupState, next_state
from broker.group.txn_offsets import PendingTxnOffsets
from broker.requests.respond import Respond
from clients.protocol import reference
from clients.protocol.message_types import JoinGroupResponse, SyncGroupResponse
from clients.protocol.schema import STRING, Array, Field, Struct
from clients.protocol.topics import TopicPartition
from timer.delayed_operation import DelayedOperation

CONSUMER_PROTOCOL_TYPE = "consumer"  # the classic consumer protocol (Kafka's ConsumerProtocol)
# what every ConsumerProtocolSubscription version starts with, after its int16 version
_SUBSCRIPTION_TOPICS = Struct(Field("topics", Array(STRING)),
                              label="ConsumerProtocolSubscription topics")
_VERSION = struct.Struct(">h")


class GroupMember:
    __slots__ = ("assignment", "client_host", "client_id", "group_instance_id", "heartbeat",
                 "join_respond", "member_id", "protocol_type", "protocols",
                 "rebalance_timeout_ms", "session_timeout_ms", "sync_respond")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join_respond: Respond[JoinGroupResponse] | None = None
        self.sync_respond: Respond[SyncGroupResponse] | None = None
        # its session timeout: a DelayedHeartbeat (broker.group.sessions)
        self.heartbeat: DelayedOperation | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def footprint_bytes(self) -> int:
        """Bytes of this member that a client chose (see the module docstring)."""
        return (sum(len(name) + len(metadata) for name, metadata in self.protocols)
                + len(self.assignment) + len(self.member_id)
                + len(self.group_instance_id or "") + len(self.client_id)
                + len(self.client_host) + len(self.protocol_type))

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def to_metadata(self, protocol: str | None, assignment: bytes) -> MemberMetadata:
        return MemberMetadata(self.member_id, self.group_instance_id, self.client_id,
                              self.client_host, self.rebalance_timeout_ms,
                              self.session_timeout_ms, self.metadata_for(protocol), assignment)

    @classmethod
    def from_metadata(cls, m: MemberMetadata, protocol_type: str,
                      protocol: str | None) -> GroupMember:
        member = cls(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                     m.session_timeout_ms, m.rebalance_timeout_ms, protocol_type,
                     [(protocol, m.subscription)] if protocol else [])
        member.assignment = m.assignment
        return member


class Group:
    """A group's state; see the module docstring."""

    def __init__(self, group_id: str, partition: int, now_ms: int,
                 state: GroupState = GroupState.EMPTY) -> None:
        self.group_id = group_id
        self.partition = partition  # the offsets-topic partition that stores it
        self.state = state
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, GroupMember] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        # KIP-394 ids handed out -> their DelayedHeartbeat (broker.group.sessions)
        self.pending_members: dict[str, DelayedOperation] = {}
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        self.offset_positions: dict[TopicPartition, int] = {}  # log offset of the commit
        # offsets of OffsetCommits being written (partition -> writes in flight)
        self.commits_in_flight: dict[TopicPartition, int] = {}
        self.pending_txn = PendingTxnOffsets()  # TxnOffsetCommits not committed/aborted yet
        self.new_member_added = False  # for the initial delayed join
        self.footprint_bytes = 0  # sum of the members' footprint_bytes()

    def __repr__(self) -> str:
        return (f"Group({self.group_id!r} {self.state.value} gen={self.generation_id} "
                f"members={list(self.members)})")

    def apply_offset(self, tp: TopicPartition, value: OffsetCommitValue, position: int) -> None:
        """Take a committed offset written at log ``position`` unless the cached one was
        written later in the log (Kafka's ``olderThan`` rule)."""
        if self.offset_positions.get(tp, -1) < position:
            self.offsets[tp] = value
            self.offset_positions[tp] = position

    def has_pending_commit(self, tp: TopicPartition) -> bool:
        """Whether a commit of ``tp`` is being written or a transactional one is pending
        (Kafka's ``hasPendingOffsetCommitsForTopicPartition``)."""
        return tp in self.commits_in_flight or self.pending_txn.has_pending(tp)

    def transition(self, event: GroupEvent, now_ms: int) -> None:
        self.state = next_state(self.group_id, self.state, event)
        self.state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def add(self, member: GroupMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.footprint_bytes += member.footprint_bytes()
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> GroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.footprint_bytes -= member.footprint_bytes()
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if not self.members:
            self.protocol_type = None
        return member

    def rename(self, old_member_id: str, new_member_id: str) -> GroupMember:
        """Static member replaced: the same member (assignment kept) under a new id."""
        member = self.members.pop(old_member_id)
        self.footprint_bytes += len(new_member_id) - len(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        return member

    def update_member(self, member: GroupMember, protocols: list[tuple[str, bytes]],
                      session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        """A known member rejoined with these protocols and timeouts."""
        self.footprint_bytes -= member.footprint_bytes()
        member.protocols = protocols
        member.session_timeout_ms = session_timeout_ms
        member.rebalance_timeout_ms = rebalance_timeout_ms
        self.footprint_bytes += member.footprint_bytes()

    def set_assignment(self, member: GroupMember, assignment: bytes) -> None:
        self.footprint_bytes += len(assignment) - len(member.assignment)
        member.assignment = assignment

    def clear_members(self) -> None:
        self.members.clear()
        self.static_members.clear()
        self.footprint_bytes = 0

    def candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        out = {name for name, _ in first.protocols}
        for member in members:
            out &= {name for name, _ in member.protocols}
        return out

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return min(votes, key=lambda name: (-votes[name], name))

    def subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members subscribe to (see the module docstring); None when
        unknown."""
        if (self.protocol_type != CONSUMER_PROTOCOL_TYPE or not self.members
                or self.protocol_name is None):
            return None
        topics: set[str] = set()
        for member in self.members.values():
            metadata = member.metadata_for(self.protocol_name)
            if len(metadata) < _VERSION.size or _VERSION.unpack_from(metadata)[0] < 0:
                return None
            try:
                body, _ = reference.decode(_SUBSCRIPTION_TOPICS, 0, False, metadata,
                                           _VERSION.size)
            except reference.FieldError:
                return None
            topics.update(body["topics"])
        return frozenset(topics)

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_respond is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def metadata_value(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataValue:
        """The group-metadata record value; ``assignments`` overrides stored ones."""
        members = tuple(
            m.to_metadata(self.protocol_name, m.assignment if assignments is None
                          else assignments.get(m.member_id, b""))
            for m in self.members.values())
        return GroupMetadataValue(self.protocol_type or "", self.generation_id,
                                  self.protocol_name, self.leader_id, self.state_timestamp_ms,
                                  members)

    def load_metadata(self, value: GroupMetadataValue) -> None:
        """Replace members and generation with a loaded group-metadata record."""
        self.clear_members()
        self.generation_id = value.generation_id
        self.protocol_name = value.protocol_name
        self.leader_id = None
        for m in value.members:
            self.add(GroupMember.from_metadata(m, value.protocol_type, value.protocol_name))
        self.protocol_type = value.protocol_type or None
        self.leader_id = value.leader_id if value.leader_id in self.members else \
            next(iter(self.members), None)
