"""The ISR changes a leader proposes to the controller (AlterPartition), in one place.

A leader shrinks its ISR when a follower lags (``replica_lag_time_max_ms``) or fetched
from below the HW (it lost committed records), expands it when a follower caught up, and
resigns (proposes the ISR without itself) when it holds a damaged range to repair.
:class:`IsrProposals` decides when to send (never a second one for a partition while one
is in flight: ``alter_in_flight``), hands proposals to ``send_alter_partition`` (the
server's channel to the controller; None standalone: nothing is sent) and applies the
answers.  The per-partition contents of a proposal (``Partition.pending_alter_partition``,
resent until answered) stay with the partition's ISR state (:mod:`replication.isr`).

Logs: each proposal (shrink, expand or resignation, with the brokers it adds or drops)
at INFO when it is made, through a :class:`~broker.logs.rate_limit.RateLimitedLog` keyed
by partition and proposed ISR (a proposal is resent until answered, and an expansion
the controller refuses is proposed again on the follower's next fetch: one line per
``PROPOSAL_LOG_INTERVAL_MS``, with the count suppressed); an accepted change ("ISR now")
once.

Contract: pure bookkeeping plus callbacks; no I/O, no event loop.  Costs: ``check_isr``
is one pass over the hosted partitions (run every ``replica_lag_time_max_ms / 4``).
Not thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from broker.logs.rate_limit import RateLimitedLog
from clients.protocol.topics import TopicPartition
from replication.isr import AlterPartitionProposal
from replication.partition import Partition
from timer.clock import Clock

log = logging.getLogger(__name__)

PROPOSAL_LOG_INTERVAL_MS = 10_000


class IsrProposals:
    def __init__(self, node_id: int, replica_lag_time_max_ms: int, clock: Clock,
                 partitions: Mapping[TopicPartition, Partition],
                 wake_partition: Callable[[TopicPartition], None],
                 send_alter_partition: Callable[[AlterPartitionProposal], None] | None) -> None:
        self.node_id = node_id
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock = clock
        self.partitions = partitions
        self.wake_partition = wake_partition
        # partitions with an AlterPartition sent and not answered yet
        self.alter_in_flight: set[TopicPartition] = set()
        # leader replicas that must resign to repair a damaged range whose segment could
        # not be rewritten in place: (first bad offset, why); cut once they follow
        self.resign_to_repair: dict[TopicPartition, tuple[int, str]] = {}
        self.send_alter_partition = send_alter_partition
        self.proposals_log = RateLimitedLog(log, clock, PROPOSAL_LOG_INTERVAL_MS)
        self.isr_shrinks = self.isr_expands = 0  # committed ISR changes (broker.metrics)

    def check_isr(self) -> None:
        """Leader duty: propose dropping lagging followers; resend unanswered proposals."""
        for key in self.partitions:
            self.check_isr_of(key)

    def check_isr_of(self, key: TopicPartition) -> None:
        """:meth:`check_isr` for one partition (also right after a follower fetched from
        below the HW: it lost committed records and leaves the ISR at once)."""
        partition = self.partitions.get(key)
        if partition is None or not partition.is_leader or key in self.alter_in_flight:
            return
        if ((key in self.resign_to_repair or partition.repair is not None)
                and partition.pending_alter_partition is None):
            self.try_resign(key, partition)
            return
        proposal = (partition.pending_alter_partition
                    or partition.maybe_shrink_isr(self.clock.now_ms(),
                                                  self.replica_lag_time_max_ms))
        if proposal is not None:
            self._propose(key, proposal)

    def maybe_expand_isr(self, key: TopicPartition, replica_id: int) -> None:
        partition = self.partitions.get(key)
        if partition is None or key in self.alter_in_flight:
            return
        proposal = partition.maybe_expand_isr(replica_id)
        if proposal is not None:
            self._propose(key, proposal)

    def try_resign(self, key: TopicPartition, partition: Partition) -> None:
        """Propose the ISR without this leader (it has a damaged range to repair); again
        from :meth:`check_isr_of` while a pending ISR change is in the way."""
        if key in self.alter_in_flight or not partition.is_leader:
            return
        others = tuple(b for b in partition.isr if b != self.node_id)
        proposal = partition.propose_isr(others) if others else None
        if proposal is not None:
            self._propose(key, proposal)

    def _propose(self, key: TopicPartition, proposal: AlterPartitionProposal) -> None:
        if self.send_alter_partition is None:
            return
        self._log_proposal(key, proposal)
        self.alter_in_flight.add(key)
        self.send_alter_partition(proposal)

    def _log_proposal(self, key: TopicPartition, proposal: AlterPartitionProposal) -> None:
        partition = self.partitions.get(key)
        isr = list(partition.isr) if partition is not None else []
        new = list(proposal.new_isr)
        dropped = [b for b in isr if b not in new]
        added = [b for b in new if b not in isr]
        if self.node_id not in new:
            why = "resigning leadership to repair a damaged range"
        elif dropped:
            why = f"shrink: {dropped} out of sync (lagging, or fetching below the HW)"
        else:
            why = f"expand: {added} caught up"
        self.proposals_log.info((key, proposal.new_isr), "%s-%d: proposing ISR %s -> %s "
                                "(%s; leader epoch %d)", *key, isr, new, why,
                                proposal.leader_epoch)

    def on_unanswered(self, proposal: AlterPartitionProposal) -> None:
        """The proposal got no answer (the controller link failed): ask again later."""
        self.alter_in_flight.discard(TopicPartition(proposal.topic, proposal.partition))

    def on_alter_partition_answer(self, proposal: AlterPartitionProposal, error_code: int,
                                  isr: list[int] | None, partition_epoch: int | None) -> None:
        key = TopicPartition(proposal.topic, proposal.partition)
        self.alter_in_flight.discard(key)
        partition = self.partitions.get(key)
        if partition is None:
            return
        before = len(partition.isr)
        if partition.on_alter_partition_response(proposal, error_code, isr, partition_epoch):
            self.isr_shrinks += len(proposal.new_isr) < before
            self.isr_expands += len(proposal.new_isr) > before
            log.info("%s-%d: ISR now %s", *key, partition.isr)
        self.wake_partition(key)
