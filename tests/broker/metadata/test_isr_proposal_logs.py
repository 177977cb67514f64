"""ISR proposals and their refusals are logged once per partition and cause, then with
the count suppressed (injected clocks): the storm after a restart (a leader proposing
to add a fenced follower on every fetch, INELIGIBLE_REPLICA each time) is one line."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from broker.metadata.alter_partition import REFUSAL_LOG_INTERVAL_MS, AlterPartitionManager
from broker.replica.isr_proposals import PROPOSAL_LOG_INTERVAL_MS, IsrProposals
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from replication.isr import AlterPartitionProposal
from tests.replication.helpers import make_partition
from timer.clock import ManualClock

TP = TopicPartition("t", 0)
PROPOSAL = AlterPartitionProposal("t", 0, 1, 3, 7, (1, 2))


def messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    got = [r.getMessage() for r in caplog.records if r.name == logger]
    caplog.clear()
    return got


class RefusingController:
    """The controller's answer to every AlterPartition: INELIGIBLE_REPLICA."""

    async def request(self, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": 0, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "error_code": int(ErrorCode.INELIGIBLE_REPLICA),
            "error_message": "t-0: brokers [2] are fenced and cannot join the isr",
            "isr": None, "partition_epoch": None}]}]}


class Answers:
    def __init__(self) -> None:
        self.codes: list[int] = []

    def on_unanswered(self, proposal: AlterPartitionProposal) -> None:
        self.codes.append(-1)

    def on_alter_partition_answer(self, proposal: AlterPartitionProposal, error_code: int,
                                  isr: list[int] | None, partition_epoch: int | None) -> None:
        self.codes.append(error_code)


class Body:
    def alter_partition_body(self, proposals: list[Any]) -> dict[str, Any]:
        return {}


def test_a_refusal_storm_is_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.metadata.alter_partition")
    clock, answers = ManualClock(0), Answers()
    manager = AlterPartitionManager(RefusingController(), Body(), answers,  # type: ignore[arg-type]
                                    clock)

    async def storm(times: int) -> None:
        for _ in range(times):
            manager.send(PROPOSAL)
            await asyncio.sleep(0)
        while manager._tasks:
            await asyncio.sleep(0)

    asyncio.run(storm(1_190))
    assert answers.codes == [ErrorCode.INELIGIBLE_REPLICA] * 1_190  # every answer applied
    got = messages(caplog, "broker.metadata.alter_partition")
    assert len(got) == 1 and got[0].startswith("AlterPartition for t-0 refused:")
    assert "INELIGIBLE_REPLICA" in got[0]
    clock.advance(REFUSAL_LOG_INTERVAL_MS)
    asyncio.run(storm(1))
    assert messages(caplog, "broker.metadata.alter_partition") == [
        got[0] + " (1189 similar suppressed)"]


def test_each_proposal_is_logged_once_with_what_it_changes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "broker.replica.isr_proposals")
    clock = ManualClock(0)
    partition = make_partition(tmp_path, 1)
    partition.make_leader(3, [1, 2], [1])
    sent: list[AlterPartitionProposal] = []
    proposals = IsrProposals(1, 10_000, clock, {TP: partition}, lambda tp: None, sent.append)
    partition.update_follower_fetch(2, 0, now_ms=0)  # caught up: expand
    proposals.maybe_expand_isr(TP, 2)
    for _ in range(4):  # unanswered (the controller link failed): proposed again
        proposals.on_unanswered(sent[-1])
        proposals.check_isr()
    assert len(sent) == 5 and len(set(sent)) == 1
    assert messages(caplog, "broker.replica.isr_proposals") == [
        "t-0: proposing ISR [1] -> [1, 2] (expand: [2] caught up; leader epoch 3)"]
    clock.advance(PROPOSAL_LOG_INTERVAL_MS)
    proposals.on_unanswered(sent[-1])
    proposals.check_isr()
    assert messages(caplog, "broker.replica.isr_proposals") == [
        "t-0: proposing ISR [1] -> [1, 2] (expand: [2] caught up; leader epoch 3) "
        "(4 similar suppressed)"]
