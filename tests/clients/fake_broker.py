"""An in-process fake cluster for client tests: real sockets, the real wire protocol.

``FakeCluster(num_brokers)`` starts one listening socket per broker on 127.0.0.1 (an
ephemeral port each) and one thread per accepted connection.  Requests are decoded and
responses encoded with :mod:`clients.protocol`, so the clients are tested against the
exact frames the real broker speaks.  State (topics, partition logs as lists of record
batches, leaders) is shared by all brokers and guarded by one condition variable.

Supported (all v0): ApiVersions, Metadata, CreateTopics, DeleteTopics, Produce, Fetch
(min_bytes / max_wait honoured by waiting on the condition), ListOffsets (-1 latest,
-2 earliest), InitProducerId.  Produce validates every batch (CRC included), stamps
base offsets and answers NOT_LEADER_OR_FOLLOWER when sent to a non-leader.  Batches
with a producer id go through the idempotent-producer rules of
:mod:`tests.clients.producer.fake_producer_state` (duplicates answered with their original
offset, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID);
batches of one request are checked and appended one after the other.

Fault injection for tests:

- ``inject_produce_errors(tp, code, times)``: the next ``times`` produce attempts for the
  partition are answered with ``code`` and not appended;
- ``drop_next_produce(times)``: close the connection when a produce request arrives,
  before appending anything (the client sees a lost connection);
- ``hide_topic(name, times)``: the next ``times`` Metadata answers say
  UNKNOWN_TOPIC_OR_PARTITION for the topic (metadata not yet propagated);
- ``blackhole_produce = True``: produce requests are read and never answered;
- ``move_leader(tp, node_id)``: leadership moves (the old leader answers NOT_LEADER).
- ``inject_produce_errors(tp, code, times, skip=n)``: as above, after ``n`` attempts
  served normally;
- ``lose_next_produce_responses(times, forget_producers=False)``: serve the next
  ``times`` produce requests (records appended) and close the connection instead of
  answering (optionally the partitions then lose their producer state);
- ``hold_produce()`` / ``release_produce()``: produce requests wait before being served;
- ``forget_producer_state(tp)``: the partition loses its producer state (as after the
  producer's batches were deleted by retention);
- ``serve_init_producer_id = False``: InitProducerId is neither served nor listed in
  ApiVersions (a broker without idempotence support);
- ``inject_init_producer_id_errors(code, times)``: the next InitProducerId answers.

Thread safety: everything goes through ``self.cond``; tests read state with the
helpers (``batches``, ``records``), which copy under the lock.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_response
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.framing import read_frame, send_buffers
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition, topic_name_error
from clients.records.batch import iter_batches, set_base_offset
from clients.records.record import Record, decode_batch
from tests.clients.producer.fake_producer_state import ProducerIdRegistry, ProducerStateTable

# Error codes as plain ints (the wire schema wants exact ints, not IntEnums).
E = SimpleNamespace(**{code.name: int(code) for code in ErrorCode})


@dataclass
class FakePartition:
    leader: int
    replicas: list[int]
    batches: list[bytes] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)


class FakeCluster:
    def __init__(self, num_brokers: int = 1, *, default_partitions: int = 1) -> None:
        self.cond = threading.Condition()
        self.topics: dict[str, list[FakePartition]] = {}
        self.default_partitions = default_partitions
        self.produce_errors: dict[TopicPartition, list[int | None]] = {}
        self.lose_responses = 0
        self.lose_forgets = False
        self.holding_produce = False
        self.serve_init_producer_id = True
        self.init_producer_id_errors: list[int] = []
        self.producer_ids = ProducerIdRegistry()
        self.drop_produce = 0
        self.hidden: dict[str, int] = {}
        self.blackhole_produce = False
        self.produce_requests = 0
        self.fetch_requests = 0
        self.request_log: list[tuple[int, int]] = []  # (node_id, api_key)
        self.errors: list[MiniKafkaError] = []  # requests the fake could not serve
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self.listeners: list[socket.socket] = []
        for node_id in range(num_brokers):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            self.listeners.append(sock)
            t = threading.Thread(target=self._accept_loop, args=(node_id, sock), daemon=True)
            t.start()
            self._threads.append(t)

    # ------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{s.getsockname()[1]}" for s in self.listeners)

    def port(self, node_id: int) -> int:
        return int(self.listeners[node_id].getsockname()[1])

    def close(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        for s in self.listeners:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for c in list(self._conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(timeout=10)

    def __enter__(self) -> FakeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ test helpers
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1) -> None:
        with self.cond:
            n = len(self.listeners)
            self.topics[name] = [
                FakePartition(p % n, [(p + r) % n for r in range(replication_factor)])
                for p in range(partitions)
            ]

    def inject_produce_errors(
        self, tp: TopicPartition, code: int, times: int = 1, skip: int = 0
    ) -> None:
        with self.cond:
            self.produce_errors.setdefault(tp, []).extend([None] * skip + [int(code)] * times)

    def lose_next_produce_responses(self, times: int = 1, forget_producers: bool = False) -> None:
        """Serve, then close instead of answering; ``forget_producers``: the partitions
        served also lose their producer state (as if it had expired meanwhile)."""
        with self.cond:
            self.lose_responses += times
            self.lose_forgets = forget_producers

    def hold_produce(self) -> None:
        with self.cond:
            self.holding_produce = True

    def release_produce(self) -> None:
        with self.cond:
            self.holding_produce = False
            self.cond.notify_all()

    def forget_producer_state(self, tp: TopicPartition) -> None:
        with self.cond:
            self.topics[tp.topic][tp.partition].producers = ProducerStateTable()

    def inject_init_producer_id_errors(self, code: int, times: int = 1) -> None:
        with self.cond:
            self.init_producer_id_errors.extend([int(code)] * times)

    def drop_next_produce(self, times: int = 1) -> None:
        with self.cond:
            self.drop_produce += times

    def hide_topic(self, name: str, times: int) -> None:
        with self.cond:
            self.hidden[name] = times

    def move_leader(self, tp: TopicPartition, node_id: int) -> None:
        with self.cond:
            self.topics[tp.topic][tp.partition].leader = node_id

    def batches(self, tp: TopicPartition) -> list[bytes]:
        with self.cond:
            return list(self.topics[tp.topic][tp.partition].batches)

    def records(self, tp: TopicPartition) -> list[Record]:
        return [r for b in self.batches(tp) for r in decode_batch(b)]

    def append(self, tp: TopicPartition, batch: bytes) -> int:
        """Append a batch directly (as if produced); returns its base offset."""
        with self.cond:
            return self._append(self.topics[tp.topic][tp.partition], batch)

    def truncate_front(self, tp: TopicPartition, batches: int) -> None:
        """Drop the oldest batches (as retention would), moving the log start offset."""
        with self.cond:
            part = self.topics[tp.topic][tp.partition]
            dropped = part.batches[:batches]
            del part.batches[:batches]
            for b in dropped:
                part.log_start_offset = max(
                    part.log_start_offset, next(iter_batches(b))[1].next_offset
                )

    # ------------------------------------------------------------ serving
    def _accept_loop(self, node_id: int, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self.cond:
                if self._stopping:
                    conn.close()
                    return
                self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(node_id, conn), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, node_id: int, conn: socket.socket) -> None:
        try:
            while True:
                frame = read_frame(conn)
                if frame is None:
                    return
                request = decode_request(frame)
                lose = False
                with self.cond:
                    self.request_log.append((node_id, int(request.api_key)))
                    if request.api_key == ApiKey.PRODUCE:
                        self.produce_requests += 1
                        if self.drop_produce > 0:
                            self.drop_produce -= 1
                            return
                        if self.blackhole_produce:
                            continue
                        while self.holding_produce and not self._stopping:
                            self.cond.wait()
                        if self.lose_responses > 0:
                            self.lose_responses -= 1
                            lose = True
                body = self._handle(node_id, request.api_key, request.body)
                if lose:
                    if self.lose_forgets:
                        for t in request.body["topics"]:
                            for p in t["partitions"]:
                                self.forget_producer_state(TopicPartition(t["name"], p["index"]))
                    return
                if body is None:
                    continue
                send_buffers(
                    conn, encode_response(request.api_key, 0, request.correlation_id, body)
                )
        except OSError:
            return
        except MiniKafkaError as e:  # a bad request: recorded so tests can see it
            with self.cond:
                self.errors.append(e)
            return
        finally:
            with self.cond:
                if conn in self._conns:
                    self._conns.remove(conn)
            conn.close()

    def _handle(self, node_id: int, api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any] | None:
        if api_key == ApiKey.API_VERSIONS:
            return {
                "error_code": 0,
                "api_keys": [
                    {"api_key": int(k), "min_version": a.min_version, "max_version": a.max_version}
                    for k, a in APIS.items()
                    if k != ApiKey.INIT_PRODUCER_ID or self.serve_init_producer_id
                ],
            }
        if api_key == ApiKey.INIT_PRODUCER_ID and self.serve_init_producer_id:
            return self._init_producer_id(body)
        if api_key == ApiKey.METADATA:
            return self._metadata(body)
        if api_key == ApiKey.CREATE_TOPICS:
            return self._create_topics(body)
        if api_key == ApiKey.DELETE_TOPICS:
            return self._delete_topics(body)
        if api_key == ApiKey.PRODUCE:
            return self._produce(node_id, body)
        if api_key == ApiKey.FETCH:
            return self._fetch(node_id, body)
        if api_key == ApiKey.LIST_OFFSETS:
            return self._list_offsets(node_id, body)
        raise MiniKafkaError(f"fake broker does not serve {api_key.name}")

    def _metadata(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            asked = body["topics"]
            names = sorted(self.topics) if asked is None else [t["name"] for t in asked]
            topics = []
            for name in names:
                hidden = self.hidden.get(name, 0)
                if hidden > 0:
                    self.hidden[name] = hidden - 1
                if name not in self.topics or hidden > 0:
                    topics.append({"error_code": E.UNKNOWN_TOPIC_OR_PARTITION, "name": name,
                                   "partitions": []})  # fmt: skip
                    continue
                parts = [
                    {"error_code": 0, "partition_index": i, "leader_id": p.leader,
                     "leader_epoch": 0, "replica_nodes": p.replicas, "isr_nodes": p.replicas}
                    for i, p in enumerate(self.topics[name])
                ]  # fmt: skip
                topics.append({"error_code": 0, "name": name, "partitions": parts})
            return {
                "brokers": [
                    {"node_id": i, "host": "127.0.0.1", "port": self.port(i)}
                    for i in range(len(self.listeners))
                ],
                "cluster_id": "fake-cluster",
                "controller_id": 0,
                "topics": topics,
            }

    def _create_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for t in body["topics"]:
            name, n, rf = t["name"], t["num_partitions"], t["replication_factor"]
            n = self.default_partitions if n == -1 else n
            rf = 1 if rf == -1 else rf
            code, msg = 0, None
            with self.cond:
                reason = topic_name_error(name)
                if reason is not None:
                    code, msg = E.INVALID_TOPIC_EXCEPTION, reason
                elif name in self.topics:
                    code, msg = E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
                elif n <= 0:
                    code, msg = E.INVALID_PARTITIONS, f"num_partitions {n} must be > 0"
                elif not 0 < rf <= len(self.listeners):
                    code, msg = E.INVALID_REPLICATION_FACTOR, f"replication factor {rf}"
                elif not body["validate_only"]:
                    self.create_topic(name, n, rf)
            out.append({"name": name, "error_code": code, "error_message": msg,
                        "num_partitions": n, "replication_factor": rf})  # fmt: skip
        return {"topics": out}

    def _delete_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            for name in body["topic_names"]:
                existed = self.topics.pop(name, None) is not None
                code = 0 if existed else E.UNKNOWN_TOPIC_OR_PARTITION
                out.append({"name": name, "error_code": code})
        return {"responses": out}

    def _partition(self, node_id: int, topic: str, index: int) -> tuple[FakePartition | None, int]:
        parts = self.topics.get(topic)
        if parts is None or not 0 <= index < len(parts):
            return None, E.UNKNOWN_TOPIC_OR_PARTITION
        if parts[index].leader != node_id:
            return None, E.NOT_LEADER_OR_FOLLOWER
        return parts[index], 0

    def _init_producer_id(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.cond:
            if self.init_producer_id_errors:
                code = self.init_producer_id_errors.pop(0)
                return {"error_code": code, "error_message": "injected", "producer_id": -1,
                        "producer_epoch": -1}  # fmt: skip
            code, pid, epoch = self.producer_ids.init(body["producer_id"], body["producer_epoch"])
        return {"error_code": code, "error_message": None, "producer_id": pid,
                "producer_epoch": epoch}  # fmt: skip

    def _append(self, part: FakePartition, records: bytes | bytearray | memoryview) -> int:
        """Append each batch (producer rules first); the first batch's base offset."""
        base = -1
        data = bytearray(records)
        for pos, header in list(iter_batches(data)):
            verdict = part.producers.check(header)
            if verdict.code:
                raise error_for(verdict.code, f"producer {header.producer_id} "
                                f"epoch {header.producer_epoch} seq {header.base_sequence}")
            if verdict.duplicate_offset >= 0:
                part.producers.duplicates += 1
                base = verdict.duplicate_offset if base < 0 else base
                continue
            base = part.log_end_offset if base < 0 else base
            part.producers.record(header, part.log_end_offset)
            set_base_offset(data, part.log_end_offset, pos)
            part.batches.append(bytes(data[pos : pos + header.size_in_bytes]))
            part.log_end_offset += header.last_offset_delta + 1
        self.cond.notify_all()
        return base

    def _produce(self, node_id: int, body: dict[str, Any]) -> dict[str, Any] | None:
        responses = []
        with self.cond:
            for t in body["topics"]:
                results = []
                for p in t["partitions"]:
                    tp = TopicPartition(t["name"], p["index"])
                    part, code = self._partition(node_id, tp.topic, tp.partition)
                    base, msg = -1, None
                    injected = self.produce_errors.get(tp)
                    forced = injected.pop(0) if part is not None and injected else None
                    if forced is not None:
                        code = forced
                    elif part is not None:
                        try:
                            base = self._append(part, p["records"])
                        except MiniKafkaError as e:
                            code, msg = int(e.code), e.message
                    results.append({"index": tp.partition, "error_code": code,
                                    "error_message": msg, "base_offset": base})  # fmt: skip
                responses.append({"name": t["name"], "partition_responses": results})
        if body["acks"] == 0:
            return None
        return {"responses": responses}

    def _fetch(self, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + body["max_wait_ms"] / 1000
        with self.cond:
            while True:
                responses, total = self._fetch_once(node_id, body)
                remaining = deadline - time.monotonic()
                if total >= body["min_bytes"] or remaining <= 0 or self._stopping:
                    self.fetch_requests += 1
                    return {"responses": responses}
                self.cond.wait(remaining)

    def _fetch_once(self, node_id: int, body: dict[str, Any]) -> tuple[list[Any], int]:
        out, total, budget = [], 0, body["max_bytes"]
        for t in body["topics"]:
            results = []
            for p in t["partitions"]:
                part, code = self._partition(node_id, t["name"], p["partition"])
                records, hw = b"", -1
                if part is not None:
                    hw = part.log_end_offset
                    offset = p["fetch_offset"]
                    if not part.log_start_offset <= offset <= part.log_end_offset:
                        code = E.OFFSET_OUT_OF_RANGE
                    else:
                        chosen: list[bytes] = []
                        size = 0
                        for b in part.batches:
                            if next(iter_batches(b, validate=False))[1].next_offset <= offset:
                                continue
                            limit = min(p["partition_max_bytes"], budget)
                            if chosen and size + len(b) > limit:
                                break
                            chosen.append(b)
                            size += len(b)
                        records = b"".join(chosen)
                        budget -= size
                        total += size
                results.append({"partition_index": p["partition"], "error_code": code,
                                "high_watermark": hw,
                                "log_start_offset": part.log_start_offset if part else -1,
                                "records": records})  # fmt: skip
            out.append({"name": t["name"], "partitions": results})
        return out, total

    def _list_offsets(self, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            for t in body["topics"]:
                results = []
                for p in t["partitions"]:
                    part, code = self._partition(node_id, t["name"], p["partition_index"])
                    offset = -1
                    if part is not None:
                        ts = p["timestamp"]
                        if ts == -1:
                            offset = part.log_end_offset
                        elif ts == -2:
                            offset = part.log_start_offset
                        else:
                            offset = self._offset_for_time(part, ts)
                    results.append({"partition_index": p["partition_index"], "error_code": code,
                                    "timestamp": -1, "offset": offset})  # fmt: skip
                out.append({"name": t["name"], "partitions": results})
        return {"topics": out}

    @staticmethod
    def _offset_for_time(part: FakePartition, ts: int) -> int:
        for b in part.batches:
            for r in decode_batch(b):
                if r.timestamp >= ts:
                    return r.offset
        return part.log_end_offset
