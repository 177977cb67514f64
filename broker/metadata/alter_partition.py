"""A leader's ISR proposals on their way to the controller (Kafka's ``AlterPartitionManager``).

:class:`AlterPartitionManager` sends each AlterPartition proposal the broker's
:class:`~broker.replica.isr_proposals.IsrProposals` hands it (one request per proposal,
as its own task on the loop, over the broker's connection to the controller; the body,
with the broker's epoch, from the metadata follower) and gives the answer back:
``on_alter_partition_answer`` with the partition's new ISR and epoch, or the error that
refused it; ``on_unanswered`` when the request failed or the answer does not name the
partition (the proposal is made again later).

Logs: a failed or refused proposal is logged at INFO through a
:class:`~broker.logs.rate_limit.RateLimitedLog` keyed by partition and error, so a
leader that proposes again on every follower fetch (a fenced follower after a restart:
INELIGIBLE_REPLICA) logs one line per partition and error every
``REFUSAL_LOG_INTERVAL_MS``, with the count of those suppressed.

Contract: :meth:`AlterPartitionManager.send` returns at once (the loop runs the
request); :meth:`AlterPartitionManager.stop` cancels the requests still out.  Costs: one
request per proposal.  Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from broker.async_client import ControllerChannel
from broker.logs.rate_limit import RateLimitedLog
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import MiniKafkaError, error_for
from replication.isr import AlterPartitionProposal
from timer.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_MS = 10_000


class AlterPartitionBody(Protocol):
    """Builds the request (:class:`broker.metadata.follower.MetadataFollower`)."""

    def alter_partition_body(self, proposals: list[Any]) -> dict[str, Any]: ...


class IsrAnswers(Protocol):
    """Takes the answers (:class:`broker.replica.isr_proposals.IsrProposals`)."""

    def on_unanswered(self, proposal: AlterPartitionProposal) -> None: ...

    def on_alter_partition_answer(self, proposal: AlterPartitionProposal, error_code: int,
                                  isr: list[int] | None, partition_epoch: int | None) -> None: ...


class AlterPartitionManager:
    """Sends ISR proposals to the controller (see the module docstring)."""

    def __init__(self, controller: ControllerChannel, body: AlterPartitionBody,
                 answers: IsrAnswers, clock: Clock | None = None) -> None:
        self.controller = controller
        self.body = body
        self.answers = answers
        self.refusals = RateLimitedLog(log, clock or MonotonicClock(), REFUSAL_LOG_INTERVAL_MS)
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, proposal: AlterPartitionProposal) -> None:
        task = asyncio.get_running_loop().create_task(self._alter_partition(proposal))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _alter_partition(self, proposal: AlterPartitionProposal) -> None:
        answers = self.answers
        try:
            answer = await self.controller.request(
                ApiKey.ALTER_PARTITION, self.body.alter_partition_body([proposal]))
        except MiniKafkaError as exc:
            self.refusals.info((proposal.topic, proposal.partition, "failed"),
                               "AlterPartition for %s-%d failed: %s", proposal.topic,
                               proposal.partition, exc)
            answers.on_unanswered(proposal)
            return
        if answer["error_code"]:
            self.refusals.info((proposal.topic, proposal.partition, answer["error_code"]),
                               "AlterPartition for %s-%d refused: %s", proposal.topic,
                               proposal.partition, error_for(answer["error_code"]))
            answers.on_alter_partition_answer(proposal, answer["error_code"], None, None)
            return
        for topic in answer["topics"]:
            for p in topic["partitions"]:
                if (topic["name"], p["partition_index"]) != (proposal.topic, proposal.partition):
                    continue  # not what was asked: ignored
                if p["error_code"]:
                    self.refusals.info(
                        (proposal.topic, proposal.partition, p["error_code"]),
                        "AlterPartition for %s-%d refused: %s", proposal.topic,
                        proposal.partition, error_for(p["error_code"], p["error_message"] or ""))
                answers.on_alter_partition_answer(proposal, p["error_code"], p["isr"],
                                                  p["partition_epoch"])
                return
        log.info("AlterPartition answer without %s-%d", proposal.topic, proposal.partition)
        answers.on_unanswered(proposal)  # ask again later
