"""Shared pieces of the group coordinator: config, group placement, error mapping, the
offsets-log interface (plain or transactional batches), the member check and the error
answers of JoinGroup/SyncGroup.

Placement (where a group is stored and coordinated) is Kafka's formula, shared with the
transaction coordinator: :func:`broker.coordination.placement.partition_for`.

Write errors (:func:`store_error`, Kafka's mapping): NOT_LEADER_OR_FOLLOWER,
KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH -> NOT_COORDINATOR; UNKNOWN_TOPIC_OR_PARTITION,
NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE;
MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE -> INVALID_COMMIT_OFFSET_SIZE;
anything else -> UNKNOWN_SERVER_ERROR.  A TxnOffsetCommit's write
(:func:`txn_store_error`) passes the producer's own errors on (INVALID_PRODUCER_EPOCH,
PRODUCER_FENCED, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, TRANSACTION_ABORTABLE);
the transaction coordinator's answer to its KIP-890 verification maps as
:func:`verification_error` says.

A member's check (:func:`member_error`): FENCED_INSTANCE_ID when its static instance is
now another member, UNKNOWN_MEMBER_ID when it is not a member.  :func:`answer_parked`
answers a member's parked JoinGroup and SyncGroup with an error (and forgets them).

Costs: O(1).  Pure but :func:`answer_parked` (it
changes the member it is given): call it from the thread that owns the group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from broker.config import BrokerConfig
from broker.group.members import Group, GroupMember
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import JoinGroupResponse, SyncGroupResponse
from replication.producer_state import VerificationGuard

Error = tuple[ErrorCode, str]
Done = Callable[[ErrorCode, int], None]


class TxnProducer(NamedTuple):
    """The producer whose transaction a TxnOffsetCommit's batch belongs to; ``guard`` and
    ``verification_required``: KIP-890's verification of the offsets partition
    (rule 7 of :mod:`replication.producer_state`; the append needs the guard taken before
    the transaction coordinator was asked, when a verifier is configured)."""

    producer_id: int
    producer_epoch: int
    guard: VerificationGuard | None = None
    verification_required: bool = False


class OffsetsLog(Protocol):
    """Where the coordinator writes: the offsets-topic partitions it leads.  With
    ``producer`` the records go as one transactional batch of that producer (a
    TxnOffsetCommit), else as a plain batch."""

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done, producer: TxnProducer | None = None) -> None: ...


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """The group coordinator's settings (Kafka's GroupCoordinatorConfig), taken from the
    broker's ``group_*`` and ``offset_metadata_max_bytes`` settings."""

    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 1_000
    offset_metadata_max_bytes: int = 4_096
    max_member_metadata_bytes: int = 1024 * 1024
    max_metadata_bytes: int = 8 * 1024 * 1024
    coordinator_max_metadata_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_broker(cls, c: BrokerConfig) -> GroupCoordinatorConfig:
        """The broker's settings; a group's metadata is also held to a quarter of the
        broker's buffer pool, where the leader's JoinGroup answer is built."""
        group_bytes = min(c.group_max_metadata_bytes, c.buffer_pool_bytes // 4)
        return cls(c.group_min_session_timeout_ms, c.group_max_session_timeout_ms,
                   c.group_initial_rebalance_delay_ms, c.group_max_size,
                   c.offset_metadata_max_bytes,
                   min(c.group_max_member_metadata_bytes, group_bytes), group_bytes,
                   c.group_coordinator_max_metadata_bytes)


def store_error(code: ErrorCode) -> ErrorCode:
    """What a failed offsets-topic write means to a group client (Kafka's mapping)."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
                ErrorCode.FENCED_LEADER_EPOCH):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE,
                ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return code if code == ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR


# what the producer state answers a transactional write, passed on as Kafka does
PRODUCER_ERRORS = frozenset({
    ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING, ErrorCode.TRANSACTION_ABORTABLE})


def txn_store_error(code: ErrorCode) -> ErrorCode:
    """What a failed TxnOffsetCommit write means to the producer: :func:`store_error`,
    but the producer's own errors (fenced epoch, no transaction) pass through."""
    return code if code in PRODUCER_ERRORS else store_error(code)


def verification_error(code: ErrorCode) -> ErrorCode:
    """What the transaction coordinator's answer to a TxnOffsetCommit's KIP-890
    verification means to the producer (Kafka's AddPartitionsToTxnManager mapping, then
    GroupMetadataManager's ``maybeConvertOffsetCommitError``): PRODUCER_FENCED ->
    INVALID_PRODUCER_EPOCH, CLUSTER_AUTHORIZATION_FAILED -> INVALID_TXN_STATE,
    NETWORK_EXCEPTION (no answer) -> COORDINATOR_LOAD_IN_PROGRESS, a coordinator that
    cannot answer now (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS) -> COORDINATOR_NOT_AVAILABLE;
    the rest (INVALID_TXN_STATE, TRANSACTION_ABORTABLE...) as answered."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    if code in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


def join_error(member_id: str, code: ErrorCode, message: str | None = None) -> JoinGroupResponse:
    return {"error_code": int(code), "error_message": message, "generation_id": -1,
            "protocol_type": None, "protocol_name": None, "leader": "",
            "member_id": member_id, "members": []}


def sync_answer(group: Group | None, code: ErrorCode, assignment: bytes = b"",
                message: str | None = None) -> SyncGroupResponse:
    ok = group is not None and code == ErrorCode.NONE
    return {"error_code": int(code), "error_message": message,
            "protocol_type": group.protocol_type if ok and group else None,
            "protocol_name": group.protocol_name if ok and group else None,
            "assignment": assignment}


def member_error(group: Group, member_id: str, instance: str | None) -> Error | None:
    """Why ``member_id`` (of static instance ``instance``) may not act in ``group``."""
    if instance is not None:
        known = group.static_members.get(instance)
        if known is not None and known != member_id:
            return (ErrorCode.FENCED_INSTANCE_ID, f"instance {instance!r} is now member "
                    f"{known!r}, not {member_id!r}")
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of the group"
    return None


def answer_parked(member: GroupMember, code: ErrorCode) -> None:
    """Answer the member's parked JoinGroup and SyncGroup (if any) with ``code``."""
    join, member.join_respond = member.join_respond, None
    if join is not None:
        join(join_error(member.member_id, code))
    sync, member.sync_respond = member.sync_respond, None
    if sync is not None:
        sync(sync_answer(None, code))
