"""The transactional workload of the simulation (``SimConfig.transactions``): one
transactional producer, one read_committed consumer, and the transaction invariants.

:class:`TxnWorkload` drives, at the ``SimConfig`` probabilities, a producer with
transactional id :data:`TRANSACTIONAL_ID` through Kafka's transaction-version-2 cycle
against the brokers' :class:`tests.sim.txn_coordinator.SimTxnCoordinator` (sent to the
state partition's leader, as FindCoordinator answers): InitProducerId, then per
transaction AddPartitionsToTxn of a random non-empty set of the data partitions, 1..
``txn_max_records`` transactional single-record batches per partition (one in flight per
partition, resent with its sequence until acknowledged, through the broker's real
Produce handler with the request's ``transactional_id``), and EndTxn v5 commit or abort
(``txn_abort_probability``; an abort may come before every batch is acknowledged); the
EndTxn answer's bumped epoch is the next transaction's.  Every request is resent after
``request_timeout_ms`` without an answer.  With ``txn_restart_probability`` per step the
producer process "restarts": a new session calls InitProducerId again with no id
(fencing the old session; the coordinator aborts its open transaction); answers to the
old session are ignored, its batches still in the network may still arrive.

The consumer fetches with ``isolation_level`` 1 from each partition's leader and
filters what it gets as Kafka's client does (``aborted_transactions``: a producer's
data from an aborted transaction's first offset up to its ABORT marker is dropped).
Records are ``t<T>-p<partition>-i<index>``: the oracle knows every record's transaction.

Invariants (:meth:`TxnWorkload.check` after every step; the consumer's at each answer):

* nothing served to read_committed at or above the answer's last stable offset;
* no record of an aborted transaction is ever delivered (an ABORT marker after delivered
  data of that producer, a delivered record of a transaction known aborted: the
  producer's abort was acknowledged, or it was fenced before sending its commit);
* a COMMIT marker ends exactly the transaction's records on that partition, all of
  them, in the order written (torn or reordered transactions fail);
* a transaction is never seen committed on one partition and aborted on another, nor
  committed after an acknowledged abort, nor aborted after an acknowledged commit;
* a stray transactional batch (``txn_stray_probability``: this producer's id and epoch,
  to a partition not in its transaction) is never appended: the leaders' KIP-890
  verification refuses it (no hanging transaction);
* at every load of the state partition (:meth:`tests.sim.txn_coordinator.
  SimTxnCoordinators.on_loaded`): no answered EndTxn loaded with the other outcome or
  missing;
* each leader's LSO is at most its HW and never moves backwards while it leads in that
  leader epoch (same process incarnation);
* every 50 steps (and after healing) every replica's log passes
  :meth:`storage.log.log.Log.check_invariants` (its ``.txnindex`` agrees with the log);
* after healing (all transactions ended, every marker written, every data partition's
  LSO at its log end: no hanging transaction, the consumer at every log end): every
  acknowledged-commit transaction was delivered whole on every partition.

No I/O.  Single-threaded.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import CorruptRecordError, ErrorCode
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches, read_header
from clients.records.control import ControlType, parse_marker
from clients.records.record import build_batch, decode_batch
from tests.sim.controller import TOPIC
from tests.sim.txn_coordinator import SimTxnCoordinators

if TYPE_CHECKING:
    from tests.sim.cluster import SimCluster

TRANSACTIONAL_ID = "sim-txn"
RETRIABLE = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


@dataclass
class Txn:
    number: int
    counts: dict[int, int]             # partition -> records it writes there
    producer_id: int
    producer_epoch: int
    acked: dict[int, int] = field(default_factory=dict)   # partition -> records acked
    commit_sent: bool = False
    outcome: str = "open"  # open, committed, aborted (acknowledged / fenced), unknown


@dataclass
class Outstanding:
    body: dict[str, Any]
    sent_ms: int


class TxnWorkload:
    """The transactional producer, the read_committed consumer and their oracle."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.coordinators = SimTxnCoordinators(cluster)
        self.session = 0
        self.phase = "init"          # init, idle, add, produce, end
        self.producer_id, self.producer_epoch = -1, -1
        self.txn: Txn | None = None
        self.txns: dict[int, Txn] = {}
        self.request: Outstanding | None = None
        self.request_seq = 0
        self.in_flight: dict[int, Outstanding] = {}  # partition -> its batch
        self.stats: collections.Counter[str] = collections.Counter()
        # the consumer
        self.position = dict.fromkeys(cluster.data_partition_ids, 0)
        self.aborted_active: dict[int, set[int]] = {
            p: set() for p in cluster.data_partition_ids}
        # (partition, producer id) -> (transaction, index) of each record delivered
        # since that producer's last marker there
        self.open_records: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.committed_seen: dict[int, set[int]] = collections.defaultdict(set)
        self.aborted_seen: set[int] = set()
        self.lso_seen: dict[tuple[int, int, int, int], int] = {}
        self.stopping = False  # healing: no new transaction

    # -- the producer ---------------------------------------------------------------

    def _send_request(self, op: str, **fields: Any) -> None:
        self.request_seq += 1
        body = {"op": op, "transactional_id": TRANSACTIONAL_ID, "request": self.request_seq,
                "session": self.session, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, **fields}
        self.request = Outstanding(body, self.c.now_ms)
        self._resend()

    def _resend(self) -> None:
        assert self.request is not None
        self.request.sent_ms = self.c.now_ms
        node = self.coordinators.node()  # FindCoordinator: the state partition's leader
        if node > 0:  # none: sent again after request_timeout_ms
            self.c.net.send(self.c.now_ms, self.c.producer_id, node, "txn_request",
                            self.request.body, 0, self.c.brokers[node].incarnation)

    def restart(self, why: str) -> None:
        """A new producer session: the open transaction is fenced (aborted by the
        coordinator) unless its commit was sent already (then it may commit)."""
        t = self.txn
        if t is not None and t.outcome == "open":
            t.outcome = "unknown" if t.commit_sent else "aborted"
            self._check_outcome(t)
        self.txn, self.request, self.in_flight = None, None, {}
        self.session += 1
        self.producer_id, self.producer_epoch = -1, -1
        self.phase = "init"
        self.stats["restarts"] += 1
        self.c.record(f"txn producer: restart ({why}), session {self.session}")

    def step(self) -> None:
        cfg = self.c.config
        rng = self.c.rng
        if (not self.stopping and self.phase != "init"
                and rng.random() < cfg.txn_restart_probability):
            self.restart("random")
        if self.request is not None:
            if self.c.now_ms - self.request.sent_ms > cfg.request_timeout_ms:
                self._resend()
            return
        if self.phase == "init":
            self._send_request("init", transaction_timeout_ms=cfg.transaction_timeout_ms)
        elif self.phase == "idle" and not self.stopping and rng.random() < cfg.produce_probability:
            parts = [p for p in self.c.data_partition_ids if rng.random() < 0.6] or [
                rng.choice(self.c.data_partition_ids)]
            number = len(self.txns) + 1
            self.txn = self.txns[number] = Txn(
                number, {p: rng.randint(1, cfg.txn_max_records) for p in parts},
                self.producer_id, self.producer_epoch)
            self.c.record(f"txn producer: begin t{number} {self.txn.counts} "
                          f"epoch={self.producer_epoch}")
            self.phase = "add"
            self._send_request("add", partitions=parts)
        elif self.phase == "produce":
            self._produce_step()

    def _produce_step(self) -> None:
        t, cfg = self.txn, self.c.config
        assert t is not None
        early_abort = not self.stopping and self.c.rng.random() < cfg.txn_abort_probability / 100
        if early_abort or all(t.acked.get(p, 0) == n for p, n in t.counts.items()):
            commit = not early_abort and self.c.rng.random() >= cfg.txn_abort_probability
            t.commit_sent = commit
            self.phase = "end"
            self._send_request("end", committed=commit)
            late = cfg.txn_late_copy_probability
            if late and self.c.rng.random() < late:  # KAFKA-17754: on another connection
                assert self.request is not None
                self.stats["late_end_txn_sent"] += 1
                self.coordinators.late_copy(self.request.body, self.c.rng.randint(50, 400))
            return
        stray = cfg.txn_stray_probability
        if stray and self.c.rng.random() < stray:
            self._send_stray(t)
        for p, n in t.counts.items():
            if t.acked.get(p, 0) == n:
                continue
            out = self.in_flight.get(p)
            if out is not None and self.c.now_ms - out.sent_ms < cfg.produce_timeout_ms + \
                    4 * cfg.max_delay_ms:
                continue
            leader = self.c.controller.leader(p)
            if leader < 0:
                continue
            index = t.acked.get(p, 0)
            if out is None:
                value = f"t{t.number}-p{p}-i{index}".encode()
                batch = build_batch([(None, value, self.c.now_ms, ())],
                                    producer_id=self.producer_id,
                                    producer_epoch=self.producer_epoch, base_sequence=index,
                                    attributes=TRANSACTIONAL_MASK)
                out = self.in_flight[p] = Outstanding(
                    {"pid": p, "batch": batch, "crc": read_header(batch).crc,
                     "request": 0, "tag": (self.session, t.number, index), "record": None,
                     "transactional_id": TRANSACTIONAL_ID}, self.c.now_ms)
            else:
                self.stats["produce_retries"] += 1
            out.sent_ms = self.c.now_ms
            self.c.net.send(self.c.now_ms, self.c.producer_id, leader, "produce", out.body,
                            0, self.c.brokers[leader].incarnation)

    def producer_message(self, kind: str, body: dict[str, Any]) -> None:
        if kind == "produce_response":
            self._on_produce_answer(body)
            return
        req = self.request
        if req is None or body["request"] != req.body["request"] or \
                body["session"] != self.session:
            return  # an answer to an older attempt or session
        self.request = None
        error = ErrorCode(body["error"])
        self.stats[f"{body['op']}:{error.name}"] += 1
        if error in RETRIABLE or error == ErrorCode.REQUEST_TIMED_OUT:
            self._send_request(req.body["op"], **{k: v for k, v in req.body.items() if k not in (
                "op", "transactional_id", "request", "session", "producer_id",
                "producer_epoch")})
            return
        if body["op"] == "init":
            if error != ErrorCode.NONE:
                self.c.fail(f"InitProducerId failed: {error.name}")
            self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
            self.phase = "idle"
            self.c.record(f"txn producer: init pid={self.producer_id} "
                          f"epoch={self.producer_epoch}")
            return
        t = self.txn
        assert t is not None
        if error != ErrorCode.NONE:  # fenced (a timeout abort bumped the epoch), ...
            self.restart(f"{body['op']} answered {error.name}")
            return
        if body["op"] == "add":
            self.phase = "produce"
            return
        # EndTxn v5: the transaction is decided; the next one uses the bumped epoch
        t.outcome = "committed" if t.commit_sent else "aborted"
        self.coordinators.end_acked[(body["producer_id"], body["producer_epoch"])] = t.commit_sent
        self._check_outcome(t)
        self.c.record(f"txn producer: t{t.number} {t.outcome}, epoch "
                      f"{self.producer_epoch} -> {body['producer_epoch']}")
        self.stats[t.outcome] += 1
        self.producer_id, self.producer_epoch = body["producer_id"], body["producer_epoch"]
        self.txn, self.in_flight, self.phase = None, {}, "idle"

    def _send_stray(self, t: Txn) -> None:
        """A transactional batch of this producer and epoch to a partition not added to
        the transaction (a buggy client, or a batch of an earlier transaction resent
        late): the leader must refuse it after asking the coordinator (KIP-890 part 1)."""
        outside = [p for p in self.c.data_partition_ids if p not in t.counts]
        leader = self.c.controller.leader(outside[0]) if outside else -1
        if leader < 0:
            return
        p = outside[0]
        batch = build_batch([(None, f"t{t.number}-p{p}-i0".encode(), self.c.now_ms, ())],
                            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=0, attributes=TRANSACTIONAL_MASK)
        self.stats["stray_sent"] += 1
        self.c.record(f"txn producer: stray batch of t{t.number} to p{p} (not in it)")
        self.c.net.send(self.c.now_ms, self.c.producer_id, leader, "produce", {
            "pid": p, "batch": batch, "crc": read_header(batch).crc, "request": 0,
            "tag": (self.session, t.number, -1), "record": None,
            "transactional_id": TRANSACTIONAL_ID}, 0, self.c.brokers[leader].incarnation)

    def _on_produce_answer(self, body: dict[str, Any]) -> None:
        session, number, index = body["tag"]
        if index < 0:  # a stray batch: never appended (no hanging transaction)
            error = ErrorCode(body["error"])
            self.stats[f"stray:{error.name}"] += 1
            if error == ErrorCode.NONE:
                self.c.fail(f"p{body['pid']}: a transactional batch of t{number} outside "
                            f"its transaction was appended @{body.get('offset')} (KIP-890)")
            return
        t = self.txn
        p = body["pid"]
        out = self.in_flight.get(p)
        if (session != self.session or t is None or t.number != number or out is None
                or out.body["tag"] != body["tag"]):
            return
        error = ErrorCode(body["error"])
        self.stats[f"produce:{error.name}"] += 1
        if error == ErrorCode.NONE:
            del self.in_flight[p]
            t.acked[p] = index + 1
        elif error in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                       ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                       ErrorCode.INVALID_TXN_STATE):
            if self.c.config.no_loss and error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                self.c.fail(f"p{p}: {error.name} for t{number} index {index}")
            self.restart(f"produce p{p} {error.name}")
        else:
            out.sent_ms = -10**9  # resent at the next step

    # -- the read_committed consumer ------------------------------------------------

    def consume(self) -> None:
        pid = self.c.rng.choice(self.c.data_partition_ids)
        state = self.c.controller.partition(pid)
        if state is None or state.leader < 0:
            return
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 1, "session_id": 0, "session_epoch": -1,
                "topics": [{"name": TOPIC, "partitions": [{
                    "partition": pid, "current_leader_epoch": state.leader_epoch,
                    "fetch_offset": self.position[pid], "log_start_offset": -1,
                    "partition_max_bytes": self.c.config.fetch_max_bytes}]}]}
        self.c.net.send(self.c.now_ms, self.c.consumer_id, state.leader, "request",
                        {"api": int(ApiKey.FETCH), "body": body,
                         "request": self.position[pid],  # answers to older ones: ignored
                         "incarnation": 0}, 0, self.c.brokers[state.leader].incarnation)

    def consumer_message(self, body: dict[str, Any]) -> None:
        for topic in body["body"]["responses"]:
            for part in topic["partitions"]:
                if body["request"] != self.position[part["partition_index"]]:
                    continue  # read from an older position: its aborted list is stale
                if part["error_code"] == ErrorCode.NONE:
                    self._consume_answer(body["leader"], part)

    def _consume_answer(self, leader: int, part: dict[str, Any]) -> None:
        p = part["partition_index"]
        raw = bytes(part["records"] or b"")
        try:
            batches = list(iter_batches(raw))
        except CorruptRecordError as exc:
            self.c.fail(f"b{leader} served p{p} bytes failing their CRC check: {exc}")
        lso = part["last_stable_offset"]
        aborted = sorted((a["first_offset"], a["producer_id"])
                         for a in part["aborted_transactions"] or [])
        active = self.aborted_active[p]
        for pos, h in batches:
            if h.base_offset != self.position[p]:
                self.c.fail(f"p{p}: read_committed answer from b{leader} starts at "
                            f"{h.base_offset}, consumer at {self.position[p]}")
            if h.last_offset >= lso:
                self.c.fail(f"b{leader} served p{p}@{h.base_offset} to read_committed at or "
                            f"above its LSO {lso}")
            while aborted and aborted[0][0] <= h.last_offset:
                active.add(aborted.pop(0)[1])
            records = decode_batch(raw, pos)
            if h.is_control:
                control, _epoch = parse_marker(records[0].key, records[0].value)
                self._on_marker(p, h.producer_id, control, h.base_offset)
                if control == ControlType.ABORT:
                    active.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in active:
                self.stats["aborted_filtered"] += len(records)
                for r in records:
                    self._note_aborted(self._txn_of(r.value)[0])
            else:
                delivered = self.open_records.setdefault((p, h.producer_id), [])
                for r in records:
                    delivered.append(self._txn_of(r.value))
                    self.stats["delivered"] += 1
            self.position[p] = h.last_offset + 1

    @staticmethod
    def _txn_of(value: bytes | None) -> tuple[int, int]:
        assert value is not None
        t, _p, i = value.decode().split("-")
        return int(t[1:]), int(i[1:])

    def _on_marker(self, p: int, producer_id: int, control: ControlType, offset: int) -> None:
        delivered = self.open_records.pop((p, producer_id), [])
        if control == ControlType.ABORT:
            if delivered:
                self.c.fail(f"aborted read: p{p} ABORT marker @{offset} of producer "
                            f"{producer_id} after delivered records {delivered[:5]}")
            return
        if not delivered:  # every committed transaction wrote here before its commit
            self.c.fail(f"p{p} COMMIT @{offset} of producer {producer_id} ends no records "
                        "(lost data, or a marker written twice)")
        numbers = {number for number, _ in delivered}
        if len(numbers) != 1:
            self.c.fail(f"p{p} COMMIT @{offset} ends records of transactions {numbers}")
        number = numbers.pop()
        t = self.txns[number]
        want = [(number, i) for i in range(t.counts[p])]
        if delivered != want:
            self.c.fail(f"torn or reordered: p{p} COMMIT @{offset} of t{number} after "
                        f"{delivered}, written {want}")
        self.committed_seen[number].add(p)
        self._check_outcome(t)

    def _note_aborted(self, number: int) -> None:
        self.aborted_seen.add(number)
        self._check_outcome(self.txns[number])

    def _check_outcome(self, t: Txn) -> None:
        seen_commit = bool(self.committed_seen.get(t.number))
        if seen_commit and (t.number in self.aborted_seen or t.outcome == "aborted"):
            self.c.fail(f"t{t.number} ({t.outcome}) committed on partitions "
                        f"{sorted(self.committed_seen[t.number])} yet aborted")
        if t.number in self.aborted_seen and t.outcome == "committed":
            self.c.fail(f"t{t.number}: acknowledged commit, yet aborted on a partition")

    # -- invariants -----------------------------------------------------------------

    def check(self) -> None:
        self.coordinators.check()
        check_logs = self.c.steps % 50 == 0
        for b in self.c.brokers.values():
            if not b.alive:
                continue
            for pid, p in b.partitions.items():
                if check_logs:
                    try:
                        b.logs[pid].check_invariants()
                    except AssertionError as exc:
                        self.c.fail(f"b{b.id} p{pid} log: {exc}")
                if not p.is_leader:
                    continue
                lso, hw = p.last_stable_offset, p.high_watermark
                if lso > hw:
                    self.c.fail(f"b{b.id} p{pid}: LSO {lso} above HW {hw}")
                key = (b.id, b.incarnation, pid, p.leader_epoch)
                if lso < self.lso_seen.get(key, 0):
                    self.c.fail(f"b{b.id} p{pid}: LSO went back {self.lso_seen[key]} -> {lso} "
                                f"in leader epoch {p.leader_epoch}")
                self.lso_seen[key] = lso

    def converged(self) -> bool:
        if self.phase not in ("idle", "init") or self.request is not None:
            return False
        if not self.coordinators.idle():
            return False
        for pid in self.c.data_partition_ids:
            leader = self.c.controller.leader(pid)
            if leader < 0:
                return False
            p = self.c.brokers[leader].partitions[pid]
            if p.last_stable_offset != p.log_end_offset or self.position[pid] != p.log_end_offset:
                return False
        return True

    def check_final(self) -> None:
        if not self.converged():
            self.c.fail(f"transactions did not settle: phase {self.phase}, markers pending "
                        f"{self.coordinators.pending_markers()}, positions {self.position}")
        for b in self.c.brokers.values():
            for pid, log in b.logs.items():
                try:
                    log.check_invariants()
                except AssertionError as exc:
                    self.c.fail(f"b{b.id} p{pid} log after healing: {exc}")
        for t in self.txns.values():
            if t.outcome == "committed" and self.committed_seen.get(t.number) != set(t.counts):
                self.c.fail(f"committed t{t.number} {t.counts} delivered whole on "
                            f"{sorted(self.committed_seen.get(t.number, ()))} only")
            if t.outcome == "unknown" and self.committed_seen.get(t.number) not in (
                    None, set(), set(t.counts)):
                self.c.fail(f"t{t.number} committed on "
                            f"{sorted(self.committed_seen[t.number])} of {sorted(t.counts)}")
