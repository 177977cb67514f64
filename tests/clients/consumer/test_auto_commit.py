"""Auto commit shared by both group protocols (clients/consumer/auto_commit.py), against
a recording OffsetCommitter stand-in and an explicit clock: the interval, the partitions
a revocation commits, nothing when off, and a failed sync commit logged, not raised."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from clients.consumer.auto_commit import AutoCommit
from clients.consumer.offset_committer import CommitFailedError, OffsetCommitter
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from clients.types import OffsetAndMetadata

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Recorder:
    group_id = "g"

    def __init__(self, fail_sync: bool = False) -> None:
        self.fail_sync = fail_sync
        self.calls: list[tuple[str, dict[TopicPartition, OffsetAndMetadata]]] = []

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata], cb: Any) -> None:
        self.calls.append(("async", offsets))

    def commit_sync(self, offsets: dict[TopicPartition, OffsetAndMetadata],
                    deadline: float) -> None:
        self.calls.append(("sync", offsets))
        if self.fail_sync:
            raise CommitFailedError("rebalanced", ErrorCode.REBALANCE_IN_PROGRESS)


def auto(recorder: Recorder, now: list[float], enabled: bool = True) -> AutoCommit:
    return AutoCommit(cast(OffsetCommitter, recorder), lambda: {A: 5, B: 9}, enabled=enabled,
                      interval_ms=1000, request_timeout_ms=500, clock=lambda: now[0])


def test_async_commits_every_interval_and_sync_ones_commit_the_partitions_named() -> None:
    now, recorder = [0.0], Recorder()
    commit = auto(recorder, now)
    commit.maybe_commit_async()
    assert recorder.calls == [] and commit.time_to_next_ms() == 1000
    now[0] = 1.0
    commit.maybe_commit_async()
    commit.maybe_commit_async()  # not due again yet
    assert recorder.calls == [("async", {A: OffsetAndMetadata(5), B: OffsetAndMetadata(9)})]
    commit.commit_sync("before revoking", [B])
    assert recorder.calls[-1] == ("sync", {B: OffsetAndMetadata(9)})


def test_nothing_is_committed_when_auto_commit_is_off() -> None:
    now, recorder = [5.0], Recorder()
    commit = auto(recorder, now, enabled=False)
    commit.maybe_commit_async()
    commit.commit_sync("on close")
    assert recorder.calls == [] and commit.time_to_next_ms() == float("inf")


def test_a_failed_sync_auto_commit_is_logged_not_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    now, recorder = [0.0], Recorder(fail_sync=True)
    with caplog.at_level(logging.WARNING, "clients.consumer.auto_commit"):
        auto(recorder, now).commit_sync("before rebalance")
    assert "auto commit before rebalance failed" in caplog.text and len(recorder.calls) == 1
