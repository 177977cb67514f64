"""A fake cluster that also serves the transaction APIs, for transactional-client tests.

:class:`FakeTxnCluster` extends :class:`tests.clients.consumer.fake_group_coordinator.
FakeGroupCluster` (so TxnOffsetCommit lands in a real fake group) with a small
transaction coordinator on node 0 (Kafka's rules, simplified):

- FindCoordinator key_type 1 answers node 0 (key_type 0 goes to the group fake);
- InitProducerId with a transactional id: the first gets a new producer id at epoch 0;
  a later one (a restarted producer) bumps the epoch and aborts the id's open
  transaction (ABORT markers), so the older producer is fenced: its AddPartitionsToTxn /
  AddOffsetsToTxn / TxnOffsetCommit / EndTxn get PRODUCER_FENCED, and its produce
  requests INVALID_PRODUCER_EPOCH once a marker of the newer epoch is on the partition;
- AddPartitionsToTxn (v0-3) / AddOffsetsToTxn record the partitions and groups of the
  ongoing transaction; TxnOffsetCommit keeps the offsets pending until the commit;
- EndTxn writes a COMMIT or ABORT control batch (:mod:`clients.records.control`) into
  each partition's log, applies (commit) or drops (abort) the pending offsets, and from
  v5 answers a bumped epoch, the markers written with it (KIP-890 part 2);
- Fetch with isolation_level 1 answers up to the last stable offset (the first offset
  of an ongoing transaction) with ``aborted_transactions``; ListOffsets latest with
  isolation_level 1 answers the last stable offset;
- Produce with transactional batches and no ``transactional_id`` answers
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (as the broker does);
- ``txn_errors[api_key]``: codes the next requests of that API answer with.

Thread safety: everything under the base class's ``cond``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.records.control import ControlType, build_marker_batch
from tests.clients.consumer.fake_group_coordinator import FakeGroupCluster
from tests.clients.fake_broker import E, FakePartition
from tests.clients.producer.fake_producer_state import ProducerEntry

_TXN_APIS = {ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
             ApiKey.TXN_OFFSET_COMMIT}  # fmt: skip


@dataclass
class FakeTxn:
    producer_id: int
    epoch: int = 0
    partitions: dict[TopicPartition, int] = field(default_factory=dict)  # tp -> LEO at add
    groups: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # group, t, p
    commits: int = 0
    aborts: int = 0


class FakeTxnCluster(FakeGroupCluster):
    def __init__(self, num_brokers: int = 1) -> None:
        super().__init__(num_brokers)
        self.txns: dict[str, FakeTxn] = {}
        self.txn_errors: dict[int, list[int]] = {}
        # tp -> aborted transactions (producer_id, first_offset, last_offset)
        self.aborted: dict[TopicPartition, list[tuple[int, int, int]]] = {}
        self._pids = itertools.count(5000)

    def _handle(self, node_id: int, api_key: ApiKey, body: dict[str, Any],
                version: int) -> dict[str, Any] | None:  # fmt: skip
        if api_key == ApiKey.FIND_COORDINATOR and body["key_type"] == 1:
            keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
            answers = [{"key": k, "error_code": 0, "node_id": 0, "host": "127.0.0.1",
                        "port": self.port(0), "error_message": None} for k in keys]
            return {"coordinators": answers} if version >= 4 else answers[0]
        if api_key == ApiKey.INIT_PRODUCER_ID and body["transactional_id"] is not None:
            with self.cond:
                return self._init_txn(body)
        if api_key == ApiKey.PRODUCE and body["transactional_id"] is None and any(
                h.is_transactional for t in body["topics"] for p in t["partitions"]
                for _, h in iter_batches(p["records"] or b"", validate=False)):  # fmt: skip
            return {"responses": [{"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                 "error_message": "transactional batches need the request's transactional_id",
                 "base_offset": -1} for p in t["partitions"]]} for t in body["topics"]]}
        if api_key not in _TXN_APIS:
            return super()._handle(node_id, api_key, body, version)
        with self.cond:
            injected = self.txn_errors.get(int(api_key))
            code = injected.pop(0) if injected else 0
            if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
                return self._add_partitions(body, code)
            if api_key == ApiKey.ADD_OFFSETS_TO_TXN:
                txn, code = self._txn(body, code)
                if txn is not None:
                    txn.groups.add(body["group_id"])
                return {"error_code": code}
            if api_key == ApiKey.TXN_OFFSET_COMMIT:
                return self._txn_offset_commit(body, code)
            return self._end_txn(body, code, version)

    # ------------------------------------------------------------ coordinator
    def _txn(self, body: dict[str, Any], code: int) -> tuple[FakeTxn | None, int]:
        txn = self.txns.get(body["transactional_id"])
        if code:
            return None, code
        if txn is None or txn.producer_id != body["producer_id"]:
            return None, E.INVALID_PRODUCER_ID_MAPPING
        if txn.epoch != body["producer_epoch"]:
            return None, E.PRODUCER_FENCED
        return txn, 0

    def _init_txn(self, body: dict[str, Any]) -> dict[str, Any]:
        injected = self.txn_errors.get(int(ApiKey.INIT_PRODUCER_ID))
        if injected:
            return {"error_code": injected.pop(0), "error_message": "injected",
                    "producer_id": -1, "producer_epoch": -1}  # fmt: skip
        txn = self.txns.get(body["transactional_id"])
        if txn is None:
            txn = self.txns[body["transactional_id"]] = FakeTxn(next(self._pids))
        else:
            if body["producer_id"] >= 0 and (body["producer_id"], body["producer_epoch"]) != (
                    txn.producer_id, txn.epoch):  # fmt: skip
                return {"error_code": E.PRODUCER_FENCED, "error_message": None,
                        "producer_id": -1, "producer_epoch": -1}  # fmt: skip
            txn.epoch += 1
            if txn.partitions or txn.groups:  # the older producer's open transaction
                self._complete(txn, committed=False)
        return {"error_code": 0, "error_message": None, "producer_id": txn.producer_id,
                "producer_epoch": txn.epoch}  # fmt: skip

    def _add_partitions(self, body: dict[str, Any], code: int) -> dict[str, Any]:
        ids = {"transactional_id": body["v3_and_below_transactional_id"],
               "producer_id": body["v3_and_below_producer_id"],
               "producer_epoch": body["v3_and_below_producer_epoch"]}  # fmt: skip
        txn, code = self._txn(ids, code)
        results = []
        for t in body["v3_and_below_topics"]:
            parts = []
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p)
                part_code = code
                if not part_code and (t["name"] not in self.topics
                                      or p >= len(self.topics[t["name"]])):  # fmt: skip
                    part_code = E.UNKNOWN_TOPIC_OR_PARTITION
                if not part_code and txn is not None and tp not in txn.partitions:
                    txn.partitions[tp] = self._part(tp).log_end_offset
                parts.append({"partition_index": p, "partition_error_code": part_code})
            results.append({"name": t["name"], "results_by_partition": parts})
        return {"results_by_topic_v3_and_below": results}

    def _txn_offset_commit(self, body: dict[str, Any], code: int) -> dict[str, Any]:
        txn, code = self._txn(body, code)
        if not code and txn is not None and body["group_id"] not in txn.groups:
            code = E.INVALID_TXN_STATE
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                if not code and txn is not None:
                    txn.offsets[(body["group_id"], t["name"], p["partition_index"])] = (
                        p["committed_offset"])
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    def _end_txn(self, body: dict[str, Any], code: int, version: int) -> dict[str, Any]:
        txn, code = self._txn(body, code)
        if txn is None:
            return {"error_code": code, "producer_id": -1, "producer_epoch": -1}
        if version >= 5:
            txn.epoch += 1  # KIP-890 part 2: every EndTxn bumps the epoch
        self._complete(txn, committed=body["committed"])
        return {"error_code": 0, "producer_id": txn.producer_id if version >= 5 else -1,
                "producer_epoch": txn.epoch if version >= 5 else -1}  # fmt: skip

    def _complete(self, txn: FakeTxn, committed: bool) -> None:
        """Markers on every partition of the transaction; offsets applied or dropped."""
        kind = ControlType.COMMIT if committed else ControlType.ABORT
        for tp, start in txn.partitions.items():
            part = self._part(tp)
            first = self._first_offset(part, txn.producer_id, start)
            marker_offset = part.log_end_offset
            self._write(part, build_marker_batch(txn.producer_id, txn.epoch, kind, 0, 0))
            if not committed and first is not None:
                self.aborted.setdefault(tp, []).append((txn.producer_id, first, marker_offset))
            entry = part.producers.producers.get(txn.producer_id)
            if entry is None or entry.epoch < txn.epoch:
                part.producers.producers[txn.producer_id] = ProducerEntry(txn.epoch)
        if committed:
            for (group, topic, p), offset in txn.offsets.items():
                self.group(group).offsets[(topic, p)] = offset
            txn.commits += 1
        else:
            txn.aborts += 1
        txn.partitions.clear()
        txn.groups.clear()
        txn.offsets.clear()

    def _part(self, tp: TopicPartition) -> FakePartition:
        return self.topics[tp.topic][tp.partition]

    @staticmethod
    def _first_offset(part: FakePartition, producer_id: int, start: int) -> int | None:
        for raw in part.batches:
            header = next(iter_batches(raw, validate=False))[1]
            if header.base_offset >= start and header.producer_id == producer_id:
                return header.base_offset
        return None

    def _write(self, part: FakePartition, batch: bytes) -> None:
        data = bytearray(batch)
        data[0:8] = part.log_end_offset.to_bytes(8, "big")
        part.batches.append(bytes(data))
        part.log_end_offset += 1
        self.cond.notify_all()

    # ------------------------------------------------------------ read_committed
    def last_stable_offset(self, tp: TopicPartition) -> int:
        part = self._part(tp)
        lso = part.log_end_offset
        for txn in self.txns.values():
            start = txn.partitions.get(tp)
            if start is not None:
                first = self._first_offset(part, txn.producer_id, start)
                if first is not None:
                    lso = min(lso, first)
        return lso

    def _fetch_once(self, node_id: int, body: dict[str, Any],
                    version: int) -> tuple[list[Any], int]:
        out, total = super()._fetch_once(node_id, body, version)
        if body["isolation_level"] != 1:
            return out, total
        for t in out:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                if p["error_code"] or tp.topic not in self.topics:
                    continue
                lso = self.last_stable_offset(tp)
                kept, first = [], None
                for pos, header in iter_batches(p["records"], validate=False):
                    if header.base_offset >= lso:
                        break
                    first = header.base_offset if first is None else first
                    kept.append(bytes(p["records"][pos : pos + header.size_in_bytes]))
                total -= len(p["records"]) - sum(map(len, kept))
                p["records"] = b"".join(kept)
                p["last_stable_offset"] = lso
                p["aborted_transactions"] = [
                    {"producer_id": pid, "first_offset": a_first}
                    for pid, a_first, a_last in self.aborted.get(tp, [])
                    if first is not None and a_last >= first and a_first < lso]
        return out, total

    def _list_offsets(self, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
        out = super()._list_offsets(node_id, body)
        if body.get("isolation_level") == 1:
            with self.cond:
                for t in out["topics"]:
                    for p in t["partitions"]:
                        asked = next(q for q in body["topics"] if q["name"] == t["name"])
                        ts = next(q["timestamp"] for q in asked["partitions"]
                              if q["partition_index"] == p["partition_index"])
                        if ts == -1 and not p["error_code"]:
                            p["offset"] = self.last_stable_offset(
                                TopicPartition(t["name"], p["partition_index"]))
        return out
