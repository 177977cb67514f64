"""Commits answered STALE_MEMBER_EPOCH (clients/consumer/stale_epoch.py and its use in
clients/consumer/offset_committer.py): the pure decision and waiting queue, then the
OffsetCommitter against a scripted coordinator channel whose "heartbeat" moves the
member's epoch (or fences it) as the test says: sync and async commits are retried with
the new epoch, and fail with CommitFailedError when the member rejoined or no new
epoch comes before the deadline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from clients.consumer.coordinator_channel import CoordinatorChannel, GroupShared
from clients.consumer.offset_committer import CommitFailedError, OffsetCommitter
from clients.consumer.stale_epoch import (
    MemberEpoch,
    StaleAction,
    StaleCommits,
    after_stale_epoch,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.request_channel import ClientResponse, InFlightRequest
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

TP = TopicPartition("t", 0)


@pytest.mark.parametrize(("sent", "now", "action"), [
    (MemberEpoch(3, 1), MemberEpoch(4, 1), StaleAction.RETRY),  # the heartbeat brought it
    (MemberEpoch(3, 1), MemberEpoch(3, 1), StaleAction.WAIT),   # answer still on its way
    (MemberEpoch(3, 1), MemberEpoch(5, 2), StaleAction.FAIL),   # fenced and rejoined
    (MemberEpoch(3, 1), MemberEpoch(-1, 1), StaleAction.FAIL),  # left / not a member
])
def test_after_stale_epoch(sent: MemberEpoch, now: MemberEpoch, action: StaleAction) -> None:
    assert after_stale_epoch(sent, now) is action


def test_stale_commits_wait_until_the_epoch_moves_or_the_deadline_and_are_bounded() -> None:
    waiting: StaleCommits[str] = StaleCommits(max_waiting=2)
    assert waiting.add("a", MemberEpoch(3, 1), deadline=10.0) is None
    assert waiting.add("b", MemberEpoch(3, 1), deadline=5.0) is None
    assert waiting.add("c", MemberEpoch(2, 1), deadline=10.0) == "a"  # full: oldest out
    assert waiting.due(MemberEpoch(3, 1), now=1.0) == (["c"], [])  # c was sent at 2
    assert waiting.due(MemberEpoch(3, 1), now=5.0) == ([], ["b"])  # deadline passed
    assert len(waiting) == 0


class ScriptedChannel:
    """What OffsetCommitter uses of a CoordinatorChannel: every OffsetCommit is answered
    by ``answer(body)``; ``on_backoff`` is the heartbeat arriving while the caller waits."""

    def __init__(self, shared: GroupShared, answer: Callable[[dict[str, Any]], ErrorCode]):
        self.shared, self.group_id = shared, "g"
        self.answer = answer
        self.max_in_flight, self.request_timeout_ms = 4, 1000
        self.now = 0.0
        self.sent: list[dict[str, Any]] = []
        self.on_backoff: Callable[[], None] = lambda: None
        self.conn = self
        self.can_send = True
        self.responses: list[ClientResponse] = []

    def clock(self) -> float:
        return self.now

    def backoff(self, deadline: float) -> None:
        self.now = min(deadline, self.now + 0.1)
        self.on_backoff()

    def _respond(self, body: dict[str, Any]) -> ClientResponse:
        self.sent.append(body)
        code = self.answer(body)
        request = InFlightRequest(len(self.sent), ApiKey.OFFSET_COMMIT, 9, 0)
        return ClientResponse(request, {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": int(code)}
            for p in t["partitions"]]} for t in body["topics"]]})

    def request(self, api: ApiKey, body: dict[str, Any], deadline: float) -> ClientResponse:
        return self._respond(body)

    def ensure(self, deadline: float) -> ScriptedChannel:
        return self

    def send(self, api: ApiKey, body: dict[str, Any], timeout_ms: int) -> InFlightRequest:
        response = self._respond(body)
        self.responses.append(response)
        return response.request

    def dead(self, why: str) -> None:
        raise AssertionError(f"coordinator marked dead: {why}")


def committer(answer: Callable[[dict[str, Any]], ErrorCode]
              ) -> tuple[OffsetCommitter, ScriptedChannel]:
    shared = GroupShared(generation_id=3, member_id="m", incarnation=1)
    channel = ScriptedChannel(shared, answer)
    offsets = OffsetCommitter(cast(CoordinatorChannel, channel), in_group=lambda: True,
                              instance_id=None)
    return offsets, channel


def broker_at(epoch: int) -> Callable[[dict[str, Any]], ErrorCode]:
    """The coordinator's member check: its member is at ``epoch``."""
    return lambda body: ErrorCode.NONE if body["generation_id"] == epoch \
        else ErrorCode.STALE_MEMBER_EPOCH


def heartbeat(shared: GroupShared, epoch: int, incarnation: int = 1) -> Callable[[], None]:
    def arrive() -> None:
        shared.generation_id, shared.incarnation = epoch, incarnation
    return arrive


def test_a_sync_commit_is_retried_at_the_epoch_the_heartbeat_brings() -> None:
    offsets, channel = committer(broker_at(4))
    channel.on_backoff = heartbeat(channel.shared, 4)
    offsets.commit_sync({TP: OffsetAndMetadata(7)}, deadline=5.0)
    assert [b["generation_id"] for b in channel.sent] == [3, 4]


def test_a_sync_commit_of_a_member_fenced_meanwhile_fails() -> None:
    offsets, channel = committer(broker_at(5))
    channel.on_backoff = heartbeat(channel.shared, 5, incarnation=2)  # rejoined
    with pytest.raises(CommitFailedError) as raised:
        offsets.commit_sync({TP: OffsetAndMetadata(7)}, deadline=5.0)
    assert raised.value.code == ErrorCode.STALE_MEMBER_EPOCH
    assert "fenced" in raised.value.message and len(channel.sent) == 1


def test_a_sync_commit_fails_when_no_new_epoch_comes_before_the_deadline() -> None:
    offsets, channel = committer(broker_at(4))  # the heartbeat never arrives
    with pytest.raises(CommitFailedError, match="deadline"):
        offsets.commit_sync({TP: OffsetAndMetadata(7)}, deadline=1.0)
    assert channel.now == 1.0 and len(channel.sent) == 1


def test_an_async_commit_waits_for_the_new_epoch_then_is_retried_in_a_poll() -> None:
    offsets, channel = committer(broker_at(4))
    results: list[MiniKafkaError | None] = []
    offsets.commit_async({TP: OffsetAndMetadata(7)}, lambda _, error: results.append(error))
    assert offsets.on_response(channel.responses.pop())  # STALE_MEMBER_EPOCH
    offsets.run_callbacks()  # no new epoch yet: it waits, no callback
    assert (results, offsets.in_flight, len(channel.sent)) == ([], 1, 1)
    heartbeat(channel.shared, 4)()
    offsets.run_callbacks()  # sent again at epoch 4
    assert [b["generation_id"] for b in channel.sent] == [3, 4]
    assert offsets.on_response(channel.responses.pop())
    offsets.run_callbacks()
    assert results == [None] and offsets.in_flight == 0


def test_an_async_commit_of_a_fenced_member_fails_with_commit_failed() -> None:
    offsets, channel = committer(broker_at(5))
    results: list[MiniKafkaError | None] = []
    offsets.commit_async({TP: OffsetAndMetadata(7)}, lambda _, error: results.append(error))
    offsets.on_response(channel.responses.pop())
    heartbeat(channel.shared, 5, incarnation=2)()
    offsets.run_callbacks()
    assert len(results) == 1 and isinstance(results[0], CommitFailedError)
    assert results[0].code == ErrorCode.STALE_MEMBER_EPOCH and len(channel.sent) == 1
