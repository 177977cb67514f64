"""The transaction coordinator of the simulation (``SimConfig.transactions``), hosted by
the brokers on a replicated ``__transaction_state`` partition.

Each broker process runs a :class:`SimTxnCoordinator`: the real sans-IO
:class:`broker.txn.coordinator.TransactionCoordinator` (its state machine, epoch bumps,
fencing, timeouts) hosted by the real
:class:`broker.coordination.internal_topic.InternalTopic`, exactly as
:class:`broker.txn.state_topic.TransactionStateTopic` hosts it in a broker, with only the
I/O adapted:

- **The state partition** is partition :attr:`SimCluster.state_pid` of the simulated topic
  (the last one; replicated, led and elected like the others, under every fault), seen
  by the InternalTopic as ``__transaction_state-0`` (:class:`StatePartitions`).  Every
  transition is one batch appended by the leader (``AppendOrigin.COORDINATOR``) and
  acknowledged from the broker's produce purgatory once the high watermark passes it
  (acks=all, ``offsets_commit_timeout_ms`` = the sim's ``produce_timeout_ms``).
- **Loading**: when a broker becomes the partition's leader (or leads it in a new epoch)
  its InternalTopic reads the log in steps on the broker's timer into the real
  :func:`broker.txn.state_topic.load_batches`; the coordinator epoch is the leader epoch;
  ``finish_load`` sends the markers of transactions left in PrepareCommit/PrepareAbort
  again.  Before it does, :meth:`SimTxnCoordinators.on_loaded` checks the state loaded
  against what the producer was told (below).  A broker that stops leading unloads.
- **Requests**: the producer finds the coordinator as FindCoordinator answers (the
  state partition's leader, :meth:`SimTxnCoordinators.node`); InitProducerId,
  AddPartitionsToTxn and EndTxn (v5, transaction version 2) reach that broker as
  messages over the simulated network; a broker that is not (yet) the coordinator answers
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS and the producer retries.
- **Markers** go out as WriteTxnMarkers v2 requests (:func:`broker.txn.markers.request_body`)
  from the coordinator's broker to the partition leader the controller names, are
  answered by that broker's real ``handle_write_txn_markers`` and fed back
  (:func:`broker.txn.markers.response_results`); an unanswered request is given up after
  ``request_timeout_ms`` and its partitions sent again, as
  :class:`broker.txn.markers.MarkerSender` does.  A crash loses the queue (the next
  coordinator sends them again after its load).
- Producer ids come from one cluster-wide counter (the controller's blocks in Kafka).

With ``txn_coordinator_move_probability`` (per step) the broker leading the state
partition crashes (:meth:`SimTxnCoordinators.maybe_move`); leader moves, crashes,
pauses and network partitions move it too.

Invariant at every load (:meth:`SimTxnCoordinators.on_loaded`): an EndTxn answered
COMMIT (at the epoch it answered) is never loaded as PrepareAbort/CompleteAbort and vice
versa, and no acknowledged EndTxn is missing from the state loaded (its epoch above the
loaded one's).

:meth:`SimTxnCoordinators.late_copy` delivers a copy of a producer's EndTxn much later
(KAFKA-17754: the same EndTxn arriving on another connection after the next transaction
began), and with ``txn_late_copy_probability`` a WriteTxnMarkers request also goes out
again 50-400 ms later (never dropped); answers to those copies are counted in
:attr:`SimTxnCoordinators.stats`.  A late EndTxn that arrives while a later transaction
is Ongoing must be refused and change nothing (:meth:`SimTxnCoordinator.on_late` fails
the run otherwise); a late marker that ends a later transaction would fail the
consumer's checks (:mod:`tests.sim.txn_workload`).

Costs: a request O(its partitions); a tick O(pending markers); a load O(state records).
Single-threaded.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from broker.coordination.internal_topic import InternalTopic, InternalTopicSpec
from broker.topic_registry import StandaloneTopic
from broker.txn.coordinator import Done, IdAnswer, TransactionCoordinator, TxnCoordinatorConfig
from broker.txn.markers import MarkerQueue, MarkersDone, TxnMarker, request_body, response_results
from broker.txn.state import COMPLETED, PREPARED, TransactionState, TxnError, TxnMetadata
from broker.txn.state_topic import load_batches
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import TRANSACTION_STATE_TOPIC, TopicPartition
from clients.records.record import build_batch
from replication.partition import Partition
from tests.sim.controller import TOPIC

if TYPE_CHECKING:
    from tests.sim.broker import SimBroker
    from tests.sim.cluster import SimCluster

TXN_KINDS = frozenset({"txn_request", "late_txn_request", "marker_response",
                       "verify_request", "verify_response"})
STATE_KEY = TopicPartition(TRANSACTION_STATE_TOPIC, 0)
MarkerBatch = list[tuple[int, TxnMarker, list[TopicPartition]]]
COMMITS = frozenset({TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT})


class CounterIds:
    """Producer ids from a counter (``broker.producer_ids`` hands out blocks)."""

    def __init__(self) -> None:
        self.next_id = 5000

    def next_producer_id(self, done: IdAnswer) -> None:
        self.next_id += 1
        done(self.next_id, ErrorCode.NONE)


class StatePartitions(Mapping[TopicPartition, Partition]):
    """A broker's replica of the state partition, under ``__transaction_state-0`` (what
    the InternalTopic reads of the broker's partitions)."""

    def __init__(self, broker: SimBroker) -> None:
        self.broker = broker

    def _replica(self) -> Partition | None:
        return self.broker.partitions.get(self.broker.c.state_pid)

    def __getitem__(self, key: TopicPartition) -> Partition:
        replica = self._replica() if key == STATE_KEY else None
        if replica is None:
            raise KeyError(key)
        return replica

    def __iter__(self) -> Iterator[TopicPartition]:
        if self._replica() is not None:
            yield STATE_KEY

    def __len__(self) -> int:
        return int(self._replica() is not None)


class SimStateTopicHost:
    """The :class:`~broker.coordination.internal_topic.InternalTopicHost` of the sim: the
    state topic exists from the start (one partition), its leader is the controller's."""

    controller = None

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster

    def partition_count(self, topic: str) -> int:
        return 1 if topic == TRANSACTION_STATE_TOPIC else 0

    def partition_exists(self, topic: str, index: int) -> bool:
        return topic == TRANSACTION_STATE_TOPIC and index == 0

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None:
        leader = self.c.controller.leader(self.c.state_pid)
        return None if leader < 0 else (leader, "sim", 9000 + leader)

    def live_broker_count(self) -> int | None:
        return None

    def validate_new_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> StandaloneTopic:
        raise AssertionError("the simulation's state partition exists from the start")

    def create_topic(self, info: StandaloneTopic) -> None:
        raise AssertionError("the simulation's state partition exists from the start")

    def min_insync_replicas(self, topic: str) -> int:
        return self.c.config.min_insync_replicas


class _CheckedLoad:
    """The coordinator as the InternalTopic drives its loads, with the loaded state
    checked (:meth:`SimTxnCoordinators.on_loaded`) just before ``finish_load``."""

    def __init__(self, host: SimTxnCoordinator) -> None:
        self.host = host
        self.coordinator = host.coordinator

    @property
    def num_partitions(self) -> int:
        return self.coordinator.num_partitions

    @num_partitions.setter
    def num_partitions(self, value: int) -> None:
        self.coordinator.num_partitions = value

    def epochs(self) -> dict[int, int]:
        return self.coordinator.epochs()

    def loading_epoch(self, partition: int) -> int | None:
        return self.coordinator.loading_epoch(partition)

    def begin_load(self, partition: int, epoch: int) -> None:
        self.coordinator.begin_load(partition, epoch)

    def finish_load(self, partition: int) -> None:
        loading = self.coordinator.loading.get(partition)
        if loading is not None:
            self.host.service.on_loaded(self.host.broker, loading[0], loading[1])
        self.coordinator.finish_load(partition)

    def unload(self, partition: int) -> None:
        self.coordinator.unload(partition)


class SimTxnCoordinators:
    """The cluster-wide side: producer ids, counters, where the coordinator is, the
    coordinator moves and the check of every load (see the module docstring)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.ids = CounterIds()
        self.stats: collections.Counter[str] = collections.Counter()
        # (producer id, epoch answered) -> committed, for every EndTxn answered NONE
        self.end_acked: dict[tuple[int, int], bool] = {}
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        """An invariant broke inside a broker's timer task or callback (the timer logs
        and swallows exceptions): the run fails at the step's :meth:`check`."""
        self.c.record(f"FAILED: {what}")
        self.failures.append(what)

    def check(self) -> None:
        if self.failures:
            self.c.fail(self.failures[0])

    def node(self) -> int:
        """The coordinator's broker as FindCoordinator answers (-1: none)."""
        return self.c.controller.leader(self.c.state_pid)

    def hosts(self) -> list[SimTxnCoordinator]:
        return [b.txn for b in self.c.brokers.values() if b.alive and b.txn is not None]

    def idle(self) -> bool:
        return all(host.idle() for host in self.hosts())

    def pending_markers(self) -> int:
        return sum(len(host.queue) for host in self.hosts())

    def maybe_move(self) -> None:
        move = self.c.config.txn_coordinator_move_probability
        if not (move and self.c.faults and self.c.rng.random() < move):
            return
        node = self.node()
        if node > 0 and self.c.brokers[node].alive:
            self.stats["coordinator_crashes"] += 1
            self.c.record(f"coordinator: b{node} (the state partition's leader) crashes")
            self.c.brokers[node].crash()

    def on_loaded(self, broker: SimBroker, epoch: int,
                  records: Mapping[str, TxnMetadata | None]) -> None:
        """A coordinator finished reading the state partition: no acknowledged EndTxn may
        be missing from it or loaded with the other outcome."""
        self.stats["coordinator_loads"] += 1
        if self.stats["coordinator_loads"] > 1:
            self.stats["coordinator_moves"] += 1
        self.c.record(f"coordinator: b{broker.id} loaded {len(records)} ids at coordinator "
                      f"epoch {epoch}: " + ", ".join(
                          f"{tid} {meta.state.name} pid={meta.producer_id} "
                          f"epoch={meta.producer_epoch}" for tid, meta in records.items()
                          if meta is not None))
        for tid, meta in records.items():
            if meta is None:
                continue
            key = (meta.producer_id, meta.producer_epoch)
            if meta.state in PREPARED | COMPLETED and key in self.end_acked:
                committed = meta.state in COMMITS
                if committed != self.end_acked[key]:
                    self.fail(f"coordinator move: {tid} pid={key[0]} epoch={key[1]} was "
                                f"answered {'COMMIT' if self.end_acked[key] else 'ABORT'}, "
                                f"b{broker.id} loaded {meta.state.name}")
            newest = max((e for p, e in self.end_acked if p == meta.producer_id), default=-1)
            if newest > meta.producer_epoch:
                self.fail(f"coordinator move: {tid} pid={meta.producer_id}: an EndTxn "
                            f"answered at epoch {newest} is missing from the state b{broker.id}"
                            f" loaded (epoch {meta.producer_epoch}, {meta.state.name})")

    def late_copy(self, body: dict[str, Any], delay_ms: int) -> None:
        """Deliver a copy of the producer request ``body`` in ``delay_ms`` to the current
        coordinator (another connection: it bypasses the first one's order), never
        dropped."""
        node = self.node()
        if node > 0:
            self.c.net.deliver_at(self.c.now_ms + delay_ms, self.c.producer_id, node,
                                  "late_txn_request", dict(body))


class SimTxnCoordinator:
    """One broker process's transaction coordinator: requests in, answers and
    WriteTxnMarkers out; it is the coordinator's ``TxnLog`` and ``MarkerChannel``."""

    def __init__(self, cluster: SimCluster, broker: SimBroker) -> None:
        self.c = cluster
        self.broker = broker
        assert cluster.txn is not None
        self.service = cluster.txn.coordinators
        self.queue = MarkerQueue()
        # with the broker's timer: AddPartitionsToTxn arriving while the previous
        # transaction completes are parked (broker/txn/parking.py), as on a real broker
        self.coordinator = TransactionCoordinator(TxnCoordinatorConfig(), cluster.clock, self,
                                                  self.service.ids, self,
                                                  timer=broker.timer)
        config = dataclasses.replace(broker.handler_core.config, offsets_commit_timeout_ms=(
            cluster.config.produce_timeout_ms))
        spec = InternalTopicSpec(TRANSACTION_STATE_TOPIC, 1, cluster.config.brokers,
                                 lambda rf: {}, "transactions")
        self.topic = InternalTopic(spec, config, broker.timer, StatePartitions(broker),
                                   broker.produce_purgatory,
                                   broker.handler_core.fetch_purgatory,
                                   SimStateTopicHost(cluster), _CheckedLoad(self),
                                   functools.partial(load_batches, self.coordinator))
        self.incarnation = broker.incarnation
        self.next_request = 0
        self.in_flight: dict[int, tuple[MarkerBatch, int]] = {}  # request -> (batch, sent)
        # KIP-890 questions to another broker's coordinator: request -> (answer, its
        # partitions, sent at ms)
        self.verifying: dict[int, tuple[asyncio.Future[dict[TopicPartition, ErrorCode]],
                                        list[TopicPartition], int]] = {}

    def stop(self) -> None:
        """The process dies: Produce requests waiting for a verification die with it
        (their tasks are cancelled before they append anything)."""
        for future, _tps, _sent in self.verifying.values():
            future.cancel()
        self.verifying.clear()

    @property
    def current(self) -> bool:
        return self.broker.alive and self.broker.incarnation == self.incarnation

    # -- TxnLog ----------------------------------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        now = self.c.now_ms
        self.topic.append(partition, build_batch([(k, v, now, ()) for k, v in records]), done)

    # -- MarkerChannel -------------------------------------------------------------

    def send(self, marker: TxnMarker, done: MarkersDone) -> None:
        self.c.record(f"coordinator b{self.broker.id}: markers "
                      f"{'COMMIT' if marker.committed else 'ABORT'} pid={marker.producer_id} "
                      f"epoch={marker.producer_epoch} "
                      f"{sorted(tp.partition for tp in marker.partitions)}")
        self.queue.add(marker, done)

    def cancel(self, transactional_ids: set[str]) -> None:
        self.queue.cancel(transactional_ids)

    # -- the process ----------------------------------------------------------------

    def idle(self) -> bool:
        return not len(self.queue) and not self.in_flight

    def tick(self) -> None:
        self.coordinator.tick()
        now, cfg = self.c.now_ms, self.c.config
        for request, (future, tps, sent) in list(self.verifying.items()):
            if now - sent > cfg.request_timeout_ms:  # the produce path: retriable
                del self.verifying[request]
                future.set_result(dict.fromkeys(tps, ErrorCode.NETWORK_EXCEPTION))
        for request, (batch, sent) in list(self.in_flight.items()):
            if now - sent > cfg.request_timeout_ms:
                del self.in_flight[request]
                for key, _marker, tps in batch:
                    self.queue.on_failure(key, tps)

        def leader_of(tp: TopicPartition) -> int | None:
            leader = self.c.controller.leader(tp.partition)
            return leader if leader > 0 else None

        late = cfg.txn_late_copy_probability
        for leader, batch in self.queue.requests(leader_of).items():
            self.next_request += 1
            self.in_flight[self.next_request] = (batch, now)
            self.service.stats["marker_requests"] += 1
            body = {"api": int(ApiKey.WRITE_TXN_MARKERS), "body": dict(request_body(batch)),
                    "request": self.next_request, "incarnation": self.broker.incarnation,
                    "reply_kind": "marker_response"}
            self.broker.send(leader, "request", body, self.c.brokers[leader].incarnation)
            if late and self.c.rng.random() < late:  # its answer: request id < 0
                self.service.stats["late_markers_sent"] += 1
                self.c.net.deliver_at(now + self.c.rng.randint(50, 400), self.broker.id,
                                      leader, "request", {**body, "request": -1})

    def on_message(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "late_txn_request":
            self.on_late(body)
        elif kind == "marker_response":
            self.on_marker_response(body)
        elif kind == "verify_request":
            tps = [TopicPartition(TOPIC, p) for p in body["partitions"]]
            answer = self.decide(body["transactional_id"], body["producer_id"],
                                 body["producer_epoch"], tps)
            self.broker.send(body["src"], "verify_response", {
                "request": body["request"],
                "answers": {tp.partition: int(code) for tp, code in answer.items()}},
                body["incarnation"])
        elif kind == "verify_response":
            waiting = self.verifying.pop(body["request"], None)
            if waiting is not None:
                waiting[0].set_result({TopicPartition(TOPIC, p): ErrorCode(code)
                                       for p, code in body["answers"].items()})
        else:
            assert kind == "txn_request", kind
            self._serve(body, self._reply)

    # -- KIP-890 part 1: the broker's TxnVerifier (handler_core.txn_verifier) -----------

    def decide(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """This coordinator's answer to a verify-only AddPartitionsToTxn (the real
        ``TransactionCoordinator.verify``; NOT_COORDINATOR and the like as errors)."""
        try:
            return self.coordinator.verify(transactional_id, producer_id, producer_epoch,
                                           partitions)
        except TxnError as exc:
            return dict.fromkeys(partitions, exc.code)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """As ``TransactionStateTopic.verify``: asked here when this broker leads the
        state partition, else over the simulated network to the broker that does
        (AddPartitionsToTxn v4 ``verify_only``; NETWORK_EXCEPTION after
        ``request_timeout_ms``, a retriable produce error)."""
        self.service.stats["verifications"] += 1
        node = self.service.node()
        if node == self.broker.id:
            return self.decide(transactional_id, producer_id, producer_epoch, partitions)
        if node < 0:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        future: asyncio.Future[dict[TopicPartition, ErrorCode]] = \
            asyncio.get_running_loop().create_future()
        self.next_request += 1
        self.verifying[self.next_request] = (future, list(partitions), self.c.now_ms)
        self.broker.send(node, "verify_request", {
            "request": self.next_request, "src": self.broker.id,
            "incarnation": self.broker.incarnation, "transactional_id": transactional_id,
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "partitions": [tp.partition for tp in partitions]},
            self.c.brokers[node].incarnation)
        return await future

    def _reply(self, answer: dict[str, Any]) -> None:
        if self.current:  # a write acknowledged after a crash answers no one
            self.broker.send(self.c.producer_id, "txn_response", answer)

    def on_marker_response(self, body: dict[str, Any]) -> None:
        stats = self.service.stats
        if body["request"] < 0:  # to a late copy
            for marker in body["body"]["markers"]:
                for topic in marker["topics"]:
                    for part in topic["partitions"]:
                        stats[f"late_marker:{ErrorCode(part['error_code']).name}"] += 1
            return
        sent = self.in_flight.pop(body["request"], None)
        if sent is None:
            return  # given up on already: its partitions were sent again
        for key, results in response_results(sent[0], body["body"]):  # type: ignore[arg-type]
            self.c.record(f"coordinator b{self.broker.id}: marker answer from "
                          f"b{body['leader']}: " + ", ".join(
                              f"p{tp.partition} {code.name}" for tp, code in results.items()))
            self.queue.on_result(key, results)

    def on_late(self, body: dict[str, Any]) -> None:
        """A late copy of an EndTxn v5: while a later transaction of the id is Ongoing
        (at an epoch above the copy's) it must be refused and change nothing."""
        entry = self.coordinator.entries.get(body["transactional_id"])
        before = entry.meta if entry is not None and entry.pending is None else None
        later = (before is not None and before.state is TransactionState.ONGOING
                 and before.producer_epoch > body["producer_epoch"])

        def answered(answer: dict[str, Any]) -> None:
            error = ErrorCode(answer["error"])
            self.service.stats[f"late_end_txn{'_during_next' if later else ''}:"
                               f"{error.name}"] += 1
            self.c.record(f"coordinator b{self.broker.id}: late EndTxn epoch="
                          f"{body['producer_epoch']} answered {error.name}"
                          f"{' (a later transaction is Ongoing)' if later else ''}")
            if later and (error == ErrorCode.NONE or entry is None or entry.meta is not before
                          or entry.pending is not None):
                self.service.fail(f"KAFKA-17754: a late EndTxn at epoch {body['producer_epoch']} "
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
