"""The simulation's clients: the producer's and the consumer's state (what was sent,
acknowledged and consumed: the oracle the invariants check replicas against), the
idempotent producer's batch in flight, and :class:`Workload`, which drives them: a
Produce (acks=all; keyed records with compaction; one idempotent batch in flight per
partition, retried with its sequence) or a consumer Fetch (replica_id -1) per step at the
``SimConfig`` probabilities, and the handling of their answers.

Messages go through the cluster's simulated network; no I/O.  Single-threaded.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import CorruptRecordError, ErrorCode
from clients.records.batch import iter_batches, read_header
from clients.records.record import build_batch, decode_batch
from tests.sim.controller import TOPIC

if TYPE_CHECKING:
    from tests.sim.cluster import SimCluster

IDEMPOTENT_ID = 7000  # the idempotent producer's producer id (no InitProducerId here)


@dataclass
class SimProducer:
    """Fire-and-forget records, or (``idempotent``) one batch in flight per partition,
    retried with its sequence until acknowledged, as an idempotent Kafka producer with
    ``max.in.flight`` 1; a sequence the leader does not expect bumps the epoch (KIP-360)."""
    next_request: int = 0
    acked: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # see kept()
    sent: int = 0
    retries: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    producer_epoch: int = 0
    next_sequence: dict[int, int] = field(default_factory=dict)       # pid -> sequence
    in_flight: dict[int, IdempotentSend] = field(default_factory=dict)  # pid -> its batch


@dataclass
class IdempotentSend:
    key: bytes | None
    value: bytes | None
    producer_epoch: int
    sequence: int
    batch: bytes
    sent_ms: int


@dataclass
class SimConsumer:
    position: dict[int, int] = field(default_factory=dict)             # pid -> next offset
    consumed: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # kept()
    fetches: int = 0



class Workload:
    """Drives the producer and the consumer of one cluster (see the module docstring)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster

    def produce(self) -> None:
        pid = self.c.rng.choice(self.c.partition_ids)
        leader = self.c.controller.leader(pid)
        if leader < 0:
            return
        p = self.c.producer
        p.next_request += 1
        tag: tuple[int, int] | None = None
        if self.c.config.idempotent:
            out = p.in_flight.get(pid)
            if out is None:
                out = p.in_flight[pid] = self._idempotent_send(pid, *self._new_record())
            elif self.c.now_ms - out.sent_ms < self.c.config.produce_timeout_ms + 4 * \
                    self.c.config.max_delay_ms:
                return  # its answer may still come
            else:
                p.retries += 1  # no answer: the same batch, same sequence, to today's leader
            out.sent_ms = self.c.now_ms
            batch, tag = out.batch, (out.producer_epoch, out.sequence)
            record = (out.key, out.value)
        else:
            record = self._new_record()
            batch = build_batch([(*record, self.c.now_ms, ())])
        p.sent += 1
        self.c.net.send(self.c.now_ms, self.c.producer_id, leader, "produce",
                      {"pid": pid, "batch": batch, "crc": read_header(batch).crc,
                       "request": p.next_request, "tag": tag, "record": record},
                      0, self.c.brokers[leader].incarnation)

    def _new_record(self) -> tuple[bytes | None, bytes | None]:
        """(key, value) of the next record: a unique value without a key, or (compaction)
        one of ``compaction_keys`` keys and a unique value or a tombstone."""
        cfg = self.c.config
        value: bytes | None = f"s{self.c.seed}-r{self.c.producer.next_request}".encode()
        if not cfg.compaction_probability:
            return None, value
        key = b"k%d" % self.c.rng.randrange(cfg.compaction_keys)
        if self.c.rng.random() < cfg.compaction_tombstone_probability:
            value = None
        return key, value

    def _idempotent_send(self, pid: int, key: bytes | None, value: bytes | None
                         ) -> IdempotentSend:
        p = self.c.producer
        sequence = p.next_sequence.get(pid, 0)
        batch = build_batch([(key, value, self.c.now_ms, ())], producer_id=IDEMPOTENT_ID,
                            producer_epoch=p.producer_epoch, base_sequence=sequence)
        return IdempotentSend(key, value, p.producer_epoch, sequence, batch, self.c.now_ms)

    def producer_message(self, body: dict[str, Any]) -> None:
        error = ErrorCode(body["error"])
        p = self.c.producer
        p.errors[error.name] += 1
        pid = body["pid"]
        if self.c._from_deleted_topic(body) and error == ErrorCode.NONE:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # stored in a deleted topic
        if self.c.config.idempotent:
            out = p.in_flight.get(pid)
            if out is None or body["tag"] != (out.producer_epoch, out.sequence):
                return  # the answer to an earlier attempt, or to a batch acknowledged since
            if error in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                         ErrorCode.UNKNOWN_PRODUCER_ID):
                if self.c.config.no_loss:
                    self.c.fail(f"p{pid}: {error.name} for sequence {out.sequence}: the "
                              "leader lost an acknowledged batch of this producer")
                self.bump_producer_epoch(f"p{pid} {error.name}")
                return
            if error != ErrorCode.NONE:
                out.sent_ms = -10**9  # retry at the next produce step
                return
            del p.in_flight[pid]
            p.next_sequence[pid] = out.sequence + 1
        if error == ErrorCode.NONE:
            p.acked[(pid, body["offset"])] = (body["crc"], body["stored_epoch"])
            if self.c.compacting:
                self.c.note_record(pid, body["offset"], tuple(body["record"]),
                                 body["stored_epoch"], "acknowledged")
            self.c.record(f"producer: acked p{pid}@{body['offset']}")

    def bump_producer_epoch(self, why: str) -> None:
        """Lossy disks lost this producer's last batches everywhere (or the topic was
        deleted): a new epoch starts every partition's sequence at 0; unacknowledged
        batches are sent again in it."""
        p = self.c.producer
        p.producer_epoch += 1
        p.next_sequence.clear()
        self.c.stats["producer_epoch_bumps"] += 1
        self.c.record(f"producer: {why}: epoch {p.producer_epoch}")
        for other, out in list(p.in_flight.items()):
            p.in_flight[other] = self._idempotent_send(other, out.key, out.value)
            p.in_flight[other].sent_ms = -10**9

    def consume(self) -> None:
        """A consumer Fetch (replica_id -1: reads up to the HW) to the partition's leader
        as the controller knows it, from the consumer's position."""
        pid = self.c.rng.choice(self.c.partition_ids)
        state = self.c.controller.partition(pid)
        if state is None or state.leader < 0:
            return
        rewind = self.c.config.consumer_rewind_probability
        if rewind and self.c.rng.random() < rewind:
            self.c.consumer.position[pid] = 0  # old segments too (rot lies there)
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"name": TOPIC, "partitions": [{
                    "partition": pid, "current_leader_epoch": state.leader_epoch,
                    "fetch_offset": self.c.consumer.position.get(pid, 0),
                    "log_start_offset": -1,
                    "partition_max_bytes": self.c.config.fetch_max_bytes}]}]}
        self.c.consumer.fetches += 1
        self.c.net.send(self.c.now_ms, self.c.consumer_id, state.leader, "request",
                      {"api": int(ApiKey.FETCH), "body": body, "request": 0,
                       "incarnation": 0}, 0, self.c.brokers[state.leader].incarnation)

    def consumer_message(self, body: dict[str, Any]) -> None:
        """Every batch served lies below the HW the answer carries; in no_loss mode it is
        kept (never lost, never changed) from then on."""
        c = self.c.consumer
        if self.c._from_deleted_topic(body):
            return  # an answer from a deleted topic's replica: not this topic's records
        for topic in body["body"]["responses"]:
            for p in topic["partitions"]:
                pid = p["partition_index"]
                if p["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE and not self.c.config.no_loss:
                    c.position[pid] = 0  # lossy: the log it read may be gone; read again
                elif p["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:  # below a log start
                    c.position[pid] = max(c.position.get(pid, 0), self.c.retained_below[pid])
                if p["error_code"]:
                    continue
                raw = bytes(p["records"])
                try:
                    batches = list(iter_batches(raw))
                except CorruptRecordError as exc:
                    self.c.fail(f"b{body['leader']} served p{pid} bytes that fail their CRC "
                              f"check to a consumer: {exc}")
                for pos, h in batches:
                    if h.last_offset >= p["high_watermark"]:
                        self.c.fail(f"b{body['leader']} served p{pid}@{h.base_offset}.."
                                  f"{h.last_offset} to a consumer above its HW "
                                  f"{p['high_watermark']}")
                    if self.c.config.no_loss and self.c.compacting:
                        self._note_consumed(pid, h, raw, pos)
                    elif self.c.config.no_loss:
                        stored = (h.crc, h.partition_leader_epoch)
                        seen = c.consumed.setdefault((pid, h.base_offset), stored)
                        if seen != stored:
                            self.c.fail(f"p{pid}@{h.base_offset} changed after it was served "
                                      "to a consumer")
                    c.position[pid] = max(c.position.get(pid, 0), h.last_offset + 1)

    def _note_consumed(self, pid: int, header: Any, data: bytes, pos: int) -> None:
        """Compaction: each record served is kept from then on (record by record)."""
        for r in decode_batch(data, pos):
            self.c.consumer.consumed.setdefault((pid, r.offset),
                                              (header.crc, header.partition_leader_epoch))
            self.c.note_record(pid, r.offset, (r.key, r.value), header.partition_leader_epoch,
                             "consumed")
