"""The transaction coordinator process of the simulation (``SimConfig.transactions``).

The real sans-IO :class:`broker.txn.coordinator.TransactionCoordinator` (its state
machine, epoch bumps, fencing, timeouts) and the real
:class:`broker.txn.markers.MarkerQueue` run in one simulated process,
:data:`TXN_COORDINATOR`.  The transactional producer's InitProducerId,
AddPartitionsToTxn and EndTxn (v5, transaction version 2) reach it as messages over the
simulated network (delayed, dropped, resent by the producer) and are fed to the
coordinator's methods; its answers go back the same way.  Its markers go out as
WriteTxnMarkers v2 requests (:func:`broker.txn.markers.request_body`) over the simulated
network to the partition leader the controller names, are answered by the broker's real
``handle_write_txn_markers`` (:meth:`tests.sim.broker.SimBroker.on_request`), and the
answers are fed back (:func:`broker.txn.markers.response_results`); an unanswered request
is given up after ``request_timeout_ms`` and its partitions sent again, as
:class:`broker.txn.markers.MarkerSender` does.

Simplification, plainly: ``__transaction_state`` is not hosted on the simulated
partitions.  The coordinator's :class:`TxnLog` is an in-memory list acknowledged when
written (so a write is never lost nor pending across a crash), and the process owns the
one state partition.  With ``txn_coordinator_move_probability`` (per step) the process
dies and a new coordinator takes the partition over at the next coordinator epoch
(:meth:`SimTxnCoordinator.move`): it loads every record written (the real
``begin_load``/``load_record``/``finish_load``, which sends the markers of transactions
left in PrepareCommit/PrepareAbort again); the old process's markers still in the
network reach leaders with the old coordinator epoch.  Producer ids come from a counter.

:meth:`SimTxnCoordinator.late_copy` delivers a copy of a producer's EndTxn much later
(KAFKA-17754: the same EndTxn arriving on another connection after the next transaction
began), and with ``txn_late_copy_probability`` a WriteTxnMarkers request also goes out
again 50-400 ms later (never dropped); answers to those copies are counted in
:attr:`SimTxnCoordinator.stats`.  A late EndTxn that arrives while a later transaction is
Ongoing must be refused and change nothing (:meth:`on_late` fails the run otherwise); a
late marker that ends a later transaction would fail the consumer's checks
(:mod:`tests.sim.txn_workload`: a COMMIT must end exactly one transaction's records).

Costs: a request O(its partitions); a tick O(pending markers).  Single-threaded.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker.txn.coordinator import Done, IdAnswer, TransactionCoordinator, TxnCoordinatorConfig
from broker.txn.markers import MarkerQueue, MarkersDone, TxnMarker, request_body, response_results
from broker.txn.state import TransactionState
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TopicPartition
from tests.sim.controller import TOPIC

if TYPE_CHECKING:
    from tests.sim.cluster import SimCluster

TXN_COORDINATOR = 103  # the coordinator process's node id on the simulated network
MarkerBatch = list[tuple[int, TxnMarker, list[TopicPartition]]]


class MemoryTxnLog:
    """The coordinator's ``__transaction_state`` writes, kept in memory (see above)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes, bytes | None]] = []

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        offset = len(self.records)
        self.records.extend((partition, k, v) for k, v in records)
        done(ErrorCode.NONE, offset)


class CounterIds:
    """Producer ids from a counter (``broker.producer_ids`` hands out blocks)."""

    def __init__(self) -> None:
        self.next_id = 5000

    def next_producer_id(self, done: IdAnswer) -> None:
        self.next_id += 1
        done(self.next_id, ErrorCode.NONE)


class SimTxnCoordinator:
    """The coordinator process: requests in, answers and WriteTxnMarkers out."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.queue = MarkerQueue()
        self.log = MemoryTxnLog()
        self.ids = CounterIds()
        self.coordinator_epoch = 0
        self.coordinator = self._load()
        self.next_request = 0
        self.in_flight: dict[int, tuple[MarkerBatch, int]] = {}  # request -> (batch, sent)
        self.markers_sent = 0
        self.stats: collections.Counter[str] = collections.Counter()

    def _load(self) -> TransactionCoordinator:
        """A coordinator process taking the state partition over at
        ``coordinator_epoch``: it reads every record written."""
        coordinator = TransactionCoordinator(TxnCoordinatorConfig(), self.c.clock, self.log,
                                             self.ids, self, num_partitions=1)
        coordinator.begin_load(0, self.coordinator_epoch)
        for partition, key, value in self.log.records:
            coordinator.load_record(partition, key, value)
        coordinator.finish_load(0)
        return coordinator

    def move(self) -> None:
        """The coordinator process dies; the next one loads the partition (see above)."""
        self.coordinator_epoch += 1
        self.queue = MarkerQueue()  # the old process's sender dies with it
        self.in_flight.clear()
        self.stats["coordinator_moves"] += 1
        self.c.record(f"coordinator: moved, coordinator epoch {self.coordinator_epoch}")
        self.coordinator = self._load()

    # -- MarkerChannel -------------------------------------------------------------

    def send(self, marker: TxnMarker, done: MarkersDone) -> None:
        self.c.record(f"coordinator: markers {'COMMIT' if marker.committed else 'ABORT'} "
                      f"pid={marker.producer_id} epoch={marker.producer_epoch} "
                      f"{sorted(tp.partition for tp in marker.partitions)}")
        self.queue.add(marker, done)

    def cancel(self, transactional_ids: set[str]) -> None:
        self.queue.cancel(transactional_ids)

    # -- the process ----------------------------------------------------------------

    def idle(self) -> bool:
        return not len(self.queue) and not self.in_flight

    def tick(self) -> None:
        move = self.c.config.txn_coordinator_move_probability
        if move and self.c.faults and self.c.rng.random() < move:
            self.move()
        self.coordinator.tick()
        now = self.c.now_ms
        for request, (batch, sent) in list(self.in_flight.items()):
            if now - sent > self.c.config.request_timeout_ms:
                del self.in_flight[request]
                for key, _marker, tps in batch:
                    self.queue.on_failure(key, tps)

        def leader_of(tp: TopicPartition) -> int | None:
            leader = self.c.controller.leader(tp.partition)
            return leader if leader > 0 else None

        late = self.c.config.txn_late_copy_probability
        for leader, batch in self.queue.requests(leader_of).items():
            self.next_request += 1
            self.in_flight[self.next_request] = (batch, now)
            self.markers_sent += 1
            body = {"api": int(ApiKey.WRITE_TXN_MARKERS), "body": dict(request_body(batch)),
                    "request": self.next_request, "incarnation": 0}
            self.c.net.send(now, TXN_COORDINATOR, leader, "request", body,
                            0, self.c.brokers[leader].incarnation)
            if late and self.c.rng.random() < late:  # its answer: request id < 0
                self.stats["late_markers_sent"] += 1
                self.c.net.deliver_at(now + self.c.rng.randint(50, 400), TXN_COORDINATOR,
                                      leader, "request", {**body, "request": -1})

    def on_message(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "response" and body["request"] < 0:  # to a late copy
            for marker in body["body"]["markers"]:
                for topic in marker["topics"]:
                    for part in topic["partitions"]:
                        name = ErrorCode(part["error_code"]).name
                        self.stats[f"late_marker:{name}"] += 1
            return
        if kind == "response":  # a leader's WriteTxnMarkers answer
            sent = self.in_flight.pop(body["request"], None)
            if sent is None:
                return  # given up on already: its partitions were sent again
            for key, results in response_results(sent[0], body["body"]):  # type: ignore[arg-type]
                self.c.record(f"coordinator: marker answer from b{body['leader']}: "
                              + ", ".join(f"p{tp.partition} {code.name}"
                                          for tp, code in results.items()))
                self.queue.on_result(key, results)
            return
        assert kind == "txn_request", kind
        self._serve(body, lambda answer: self.c.net.send(
            self.c.now_ms, TXN_COORDINATOR, self.c.producer_id, "txn_response", answer))

    def late_copy(self, body: dict[str, Any], delay_ms: int) -> None:
        """Deliver a copy of the producer request ``body`` in ``delay_ms`` (another
        connection: it bypasses the first one's order), never dropped."""
        self.c.net.deliver_at(self.c.now_ms + delay_ms, self.c.producer_id, TXN_COORDINATOR,
                              "late_txn_request", dict(body))

    def on_late(self, body: dict[str, Any]) -> None:
        """A late copy of an EndTxn v5: while a later transaction of the id is Ongoing
        (at an epoch above the copy's) it must be refused and change nothing."""
        entry = self.coordinator.entries.get(body["transactional_id"])
        before = entry.meta if entry is not None and entry.pending is None else None
        later = (before is not None and before.state is TransactionState.ONGOING
                 and before.producer_epoch > body["producer_epoch"])

        def answered(answer: dict[str, Any]) -> None:
            error = ErrorCode(answer["error"])
            self.stats[f"late_end_txn{'_during_next' if later else ''}:{error.name}"] += 1
            self.c.record(f"coordinator: late EndTxn epoch={body['producer_epoch']} answered "
                          f"{error.name}{' (a later transaction is Ongoing)' if later else ''}")
            if later and (error == ErrorCode.NONE or entry is None or entry.meta is not before
                          or entry.pending is not None):
                self.c.fail(f"KAFKA-17754: a late EndTxn at epoch {body['producer_epoch']} "
                            f"was {error.name} and changed the Ongoing transaction {before}")
        self._serve(body, answered)

    def _serve(self, body: dict[str, Any], reply: Any) -> None:
        op, tid = body["op"], body["transactional_id"]

        def respond(error: ErrorCode, producer_id: int = -1, producer_epoch: int = -1) -> None:
            reply({"request": body["request"], "session": body["session"], "op": op,
                   "error": int(error), "producer_id": producer_id,
                   "producer_epoch": producer_epoch})

        coordinator = self.coordinator
        if op == "init":
            coordinator.init_producer_id(tid, body["transaction_timeout_ms"],
                                         body["producer_id"], body["producer_epoch"], respond)
        elif op == "add":
            coordinator.add_partitions(
                tid, body["producer_id"], body["producer_epoch"],
                [TopicPartition(TOPIC, p) for p in body["partitions"]], respond,
                client_transaction_version=2)
        elif op == "end":
            coordinator.end_txn(tid, body["producer_id"], body["producer_epoch"],
                                body["committed"], 2, respond)
        else:
            raise AssertionError(f"unknown transaction request {op}")
