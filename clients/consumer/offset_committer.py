"""Committing and fetching a group's offsets (OffsetCommit, OffsetFetch).

Versions: the connection's highest common one (OffsetCommit 2-8, OffsetFetch 1-8); the
OffsetFetch body and answer follow :mod:`clients.consumer.group_requests` (``groups``
from v8).  OffsetCommit's ``retention_time_ms`` (v2-4) is sent as -1 (the broker's
default) and ``committed_leader_epoch`` (v6+) as the epoch the offset came with.

OffsetCommit carries the member's generation and member id when the consumer is an
active member (subscribed and joined); otherwise generation -1 and member "" (a
*simple* commit, which the coordinator accepts only for a group without members, e.g.
a consumer that uses ``assign()`` with a ``group_id``).  OffsetFetch asks with
``require_stable`` so offsets still pending in a rebalance are not returned stale.

Errors, per partition: NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / transport errors
forget the coordinator and are retried (sync commit, fetch) until the deadline;
COORDINATOR_LOAD_IN_PROGRESS is retried; REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and
UNKNOWN_MEMBER_ID raise :class:`CommitFailedError` and request a rejoin (the member id is
dropped for UNKNOWN_MEMBER_ID); STALE_MEMBER_EPOCH (a KIP-848 member whose heartbeat has
not brought its new epoch yet) is retried at the member's new epoch, sync and async
(auto commits too), and fails with :class:`CommitFailedError` if the member was fenced
or rejoined meanwhile or the deadline passed (:mod:`clients.consumer.stale_epoch`;
async ones wait in the poll thread, at most ``max_in_flight`` of them); anything else
raises its error.  Async commits are otherwise never retried (a later commit supersedes
them); their callbacks run in the poll thread via
:meth:`OffsetCommitter.run_callbacks`.  Outstanding async commits are bounded by the
coordinator connection's ``max_in_flight``: beyond it ``commit_async`` waits for a
response.

Costs: one round trip per commit or fetch.  Thread safety: poll thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import cast

from clients.consumer.coordinator_channel import CoordinatorChannel
from clients.consumer.group_requests import offset_fetch_request, read_offset_fetch
from clients.consumer.stale_epoch import MemberEpoch, StaleAction, StaleCommits, after_stale_epoch
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError, error_for
from clients.protocol.message_types import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
)
from clients.protocol.request_channel import ClientResponse
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

__all__ = ["CommitCallback", "CommitFailedError", "OffsetCommitter"]

Offsets = dict[TopicPartition, OffsetAndMetadata]
CommitCallback = Callable[[Offsets, MiniKafkaError | None], None]
AsyncCommit = tuple[Offsets, CommitCallback | None]
COORDINATOR_GONE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                              ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT})
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION,
                    ErrorCode.UNKNOWN_MEMBER_ID})  # fmt: skip


class CommitFailedError(MiniKafkaError):
    """The commit was rejected because the group rebalanced (the code says how): the
    partitions may belong to another member now; the next poll rejoins."""


class OffsetCommitter:
    def __init__(self, channel: CoordinatorChannel, *, in_group: Callable[[], bool],
                 instance_id: str | None) -> None:
        self.channel = channel
        self.group_id = channel.group_id
        self._in_group = in_group
        self._instance_id = instance_id
        # async commits in flight: correlation id -> (commit, epoch sent with, deadline)
        self._pending: dict[int, tuple[AsyncCommit, MemberEpoch, float]] = {}
        self._stale: StaleCommits[AsyncCommit] = StaleCommits(channel.max_in_flight)
        self._completed: list[tuple[CommitCallback | None, Offsets, MiniKafkaError | None]] = []

    # ------------------------------------------------------------ commit
    def _member_epoch(self) -> MemberEpoch:
        shared = self.channel.shared
        with shared.lock:
            member = self._in_group() and shared.generation_id >= 0
            return MemberEpoch(shared.generation_id if member else -1, shared.incarnation)

    def _body(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]
              ) -> tuple[OffsetCommitRequest, MemberEpoch]:
        shared = self.channel.shared
        with shared.lock:
            member = self._in_group() and shared.generation_id >= 0
            generation = shared.generation_id if member else -1
            member_id = shared.member_id if member else ""
            sent = MemberEpoch(generation, shared.incarnation)
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, om in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch, "committed_metadata": om.metadata,
            })  # fmt: skip
        return {"group_id": self.group_id, "generation_id": generation, "member_id": member_id,
                "group_instance_id": self._instance_id if member else None,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}, sent

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                    deadline: float) -> None:
        """Commit and wait, retrying coordinator errors until ``deadline``."""
        while offsets:
            body, sent = self._body(offsets)
            response = self.channel.request(ApiKey.OFFSET_COMMIT, body, deadline)
            if response is None:
                raise RequestTimedOutError(f"commit of {len(offsets)} offsets for group "
                                           f"{self.group_id!r} did not finish in time")
            error = self._error(response)
            if error is None:
                return
            if error.code == ErrorCode.STALE_MEMBER_EPOCH:
                while (action := after_stale_epoch(sent, self._member_epoch())) \
                        is StaleAction.WAIT and self.channel.clock() < deadline:
                    self.channel.backoff(deadline)  # the heartbeat brings the new epoch
                if action is StaleAction.RETRY:
                    continue
                raise _stale_failed(error, action)
            if not error.retriable:
                raise error
            self.channel.backoff(deadline)

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: CommitCallback | None) -> None:
        """Send a commit; ``callback(offsets, error)`` runs in a later poll."""
        offsets = dict(offsets)
        channel = self.channel
        deadline = channel.clock() + channel.request_timeout_ms / 1000
        conn = channel.ensure(deadline)
        while conn is not None and channel.conn is conn and not conn.can_send:
            channel.drain(channel.remaining_ms(deadline))  # bounded pipe: wait for one
            if channel.clock() >= deadline:
                break
        request = sent = None
        if conn is not None and channel.conn is conn and conn.can_send:
            body, sent = self._body(offsets)
            request = channel.send(ApiKey.OFFSET_COMMIT, body, channel.request_timeout_ms)
        if request is None or sent is None:
            error = RequestTimedOutError(f"no coordinator reachable for group {self.group_id!r}")
            self._completed.append((callback, offsets, error))
            return
        self._pending[request.correlation_id] = ((offsets, callback), sent, deadline)

    def on_response(self, response: ClientResponse) -> bool:
        """Take an async commit's response (True if it was one); one answered
        STALE_MEMBER_EPOCH waits for :meth:`run_callbacks` to retry or fail it."""
        if response.request.api_key != ApiKey.OFFSET_COMMIT:
            return False
        entry = self._pending.pop(response.request.correlation_id, None)
        if entry is None:
            return False
        (offsets, callback), sent, deadline = entry
        error = self._error(response)
        if error is not None and error.code == ErrorCode.STALE_MEMBER_EPOCH:
            evicted = self._stale.add((offsets, callback), sent, deadline)
            if evicted is not None:
                self._completed.append((evicted[1], evicted[0], error))
            return True
        self._completed.append((callback, offsets, error))
        return True

    def run_callbacks(self) -> None:
        """Retry the async commits whose member epoch moved on (or fail them), then
        run the callbacks of those completed."""
        if self._stale:
            retry, failed = self._stale.due(self._member_epoch(), self.channel.clock())
            for offsets, callback in failed:
                stale = CommitFailedError(f"commit of {len(offsets)} offsets for group "
                                          f"{self.group_id!r}: the member epoch is stale and "
                                          "the member was fenced or the deadline passed",
                                          ErrorCode.STALE_MEMBER_EPOCH)
                self._completed.append((callback, offsets, stale))
            for offsets, callback in retry:
                self.commit_async(offsets, callback)
        done, self._completed = self._completed, []
        for callback, offsets, error in done:
            if callback is not None:
                callback(offsets, error)

    @property
    def in_flight(self) -> int:
        """Async commits not completed yet (sent, or waiting for a new member epoch)."""
        return len(self._pending) + len(self._stale)

    def _error(self, response: ClientResponse) -> MiniKafkaError | None:
        if response.error is not None:
            self.channel.dead(response.error.message)
            return response.error
        assert response.body is not None
        for t in cast(OffsetCommitResponse, response.body)["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                if code == ErrorCode.NONE:
                    continue
                where = (f"commit of {t['name']}-{p['partition_index']} for group "
                         f"{self.group_id!r}: {p.get('error_message') or ''}").rstrip(": ")
                if code in COORDINATOR_GONE:
                    self.channel.dead(where)
                if code in REJOIN:
                    shared = self.channel.shared
                    with shared.lock:
                        shared.rejoin_needed = True
                        if code == ErrorCode.UNKNOWN_MEMBER_ID:
                            shared.reset_member()
                    return CommitFailedError(where, ErrorCode(code))
                return error_for(code, where)
        return None

    # ------------------------------------------------------------ fetch
    def fetch_committed(self, partitions: Iterable[TopicPartition],
                        deadline: float) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets (None where nothing is committed); retries until ``deadline``."""
        wanted = sorted(set(partitions))
        group_id = self.group_id
        while wanted:
            response = self.channel.request(
                ApiKey.OFFSET_FETCH, lambda v: offset_fetch_request(group_id, wanted, v),
                deadline)  # fmt: skip
            if response is None:
                raise RequestTimedOutError(f"committed offsets of group {self.group_id!r} "
                                           "not fetched in time")
            if response.error is not None:
                self.channel.backoff(deadline)
                continue
            assert response.body is not None
            result, code = read_offset_fetch(response.body, response.request.api_version,
                                             group_id)  # fmt: skip
            code = code or next((c for _, c in result.values() if c), 0)
            if code == ErrorCode.NONE:
                return {tp: result[tp][0] if tp in result else None for tp in wanted}
            error = error_for(code, f"offset fetch for group {self.group_id!r}")
            if not error.retriable:
                raise error
            if code in COORDINATOR_GONE:
                self.channel.dead(error.message)
            self.channel.backoff(deadline)
        return {}


def _stale_failed(error: MiniKafkaError, action: StaleAction) -> CommitFailedError:
    """A sync commit answered STALE_MEMBER_EPOCH that is not retried: fenced or timed out."""
    why = "the member was fenced or rejoined" if action is StaleAction.FAIL else \
        "no new member epoch before the deadline"
    return CommitFailedError(f"{error.message} ({why})", ErrorCode.STALE_MEMBER_EPOCH)
