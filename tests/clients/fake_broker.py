"""An in-process fake cluster for client tests: real sockets, the real wire protocol.

``FakeCluster(num_brokers)`` starts one listening socket per broker on 127.0.0.1 (an
ephemeral port each) and one thread per accepted connection.  Requests are decoded and
responses encoded with :mod:`clients.protocol`, so the clients are tested against the
exact frames the real broker speaks.  State (topics, partition logs as lists of record
batches, leaders, topic configs) is shared by all brokers and guarded by one condition
variable.

Versions: ApiVersions advertises every API of :data:`clients.protocol.registry.APIS` at
our served range (``version_caps`` replaces a key's range, ``unserved`` leaves keys out,
so tests can play an older or newer broker); it is answered at the version asked, or, for a version
outside the advertised range, with Kafka's v0 fallback (UNSUPPORTED_VERSION listing the
ApiVersions range).  Every other request must come at an advertised version (else it is
recorded in ``errors``) and is answered in that version's shape; ``version_log`` records
(api key, version) of each request.

Served: ApiVersions, Metadata (with our ``configs`` extra), CreateTopics (configs as
``{name, value}``, v5+ answers with the resulting configs), DeleteTopics,
CreatePartitions, DescribeCluster, DescribeConfigs / AlterConfigs /
IncrementalAlterConfigs (topic configs of :data:`TOPIC_CONFIGS`, broker configs of
:data:`BROKER_CONFIGS`; unknown names INVALID_CONFIG), Produce, Fetch (by topic id from
v13: Metadata answers :func:`fake_topic_id` of each name; sessionless only:
session 0 epoch -1, else recorded as an error; min_bytes / max_wait honoured by waiting
on the condition), ListOffsets (-1 latest, -2 earliest, -3 max timestamp, else the first
offset at or after the timestamp, -1 when none), DeleteRecords, InitProducerId.  Produce
validates every batch (CRC included), stamps base offsets and answers
NOT_LEADER_OR_FOLLOWER when sent to a non-leader.  Batches with a producer id go through
the idempotent-producer rules of :mod:`tests.clients.producer.fake_producer_state`
(duplicates answered with their original offset, OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH, UNKNOWN_PRODUCER_ID); batches of one request are checked and
appended one after the other.  The group APIs are in
:mod:`tests.clients.consumer.fake_group_coordinator`.

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
import hashlib
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from clients.network.cluster_metadata import ClusterMetadata
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import (
    RequestHeader,
    decode_request_body,
    decode_request_header,
    encode_response,
)
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.framing import read_frame, send_buffers
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition, topic_name_error
from clients.records.batch import iter_batches, set_base_offset
from clients.records.record import Record, decode_batch
from tests.clients.producer.fake_producer_state import ProducerIdRegistry, ProducerStateTable

# Error codes as plain ints (the wire schema wants exact ints, not IntEnums).
E = SimpleNamespace(**{code.name: int(code) for code in ErrorCode})

# Topic configs the fake knows, with their defaults (Kafka's names); others are INVALID_CONFIG.
TOPIC_CONFIGS = {
    "cleanup.policy": "delete", "retention.ms": "604800000", "retention.bytes": "-1",
    "segment.bytes": "67108864", "max.message.bytes": "1048588", "min.insync.replicas": "1",
}  # fmt: skip
LIST_CONFIGS = {"cleanup.policy"}  # the one list-typed config (APPEND / SUBTRACT apply)
BROKER_CONFIGS = {"num.partitions": "1", "default.replication.factor": "1",
                  "log.retention.hours": "168"}  # fmt: skip
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_DYNAMIC_TOPIC, SOURCE_DYNAMIC_BROKER, SOURCE_DEFAULT = 1, 2, 5


def fake_topic_id(name: str) -> bytes:
    """The topic id Metadata answers for ``name`` (Fetch v13+ names topics by it)."""
    return hashlib.md5(name.encode()).digest()


@dataclass
class FakePartition:
    leader: int
    replicas: list[int]
    batches: list[bytes] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)



def one_leader_metadata(topic: str = "t") -> ClusterMetadata:
    """Client-side metadata of one broker (node 0) leading ``topic``'s one partition."""
    md = ClusterMetadata()
    md.update({
        "brokers": [{"node_id": 0, "host": "h", "port": 1}], "controller_id": 0,
        "topics": [{"error_code": 0, "name": topic, "partitions": [
            {"error_code": 0, "partition_index": 0, "leader_id": 0, "leader_epoch": 0,
             "replica_nodes": [0], "isr_nodes": [0]}]}],
    })  # fmt: skip
    return md

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
        self.too_large_answers = 0  # MESSAGE_TOO_LARGE (a topic's max.message.bytes)
        self.fetch_requests = 0
        self.fetch_isolation_levels: list[int] = []
        self.produced_records: list[tuple[TopicPartition, bytes]] = []  # as received
        self.connections_accepted = 0
        self.request_log: list[tuple[int, int]] = []  # (node_id, api_key)
        self.version_log: list[tuple[int, int]] = []  # (api_key, version) of each request
        # ApiVersions: (min, max) to advertise instead of ours, and keys not served at all
        self.version_caps: dict[int, tuple[int, int]] = {}
        self.unserved: set[int] = set()
        self.topic_configs: dict[str, dict[str, str]] = {}  # overrides, by topic
        self.broker_configs: dict[str, str] = dict(BROKER_CONFIGS)
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
    def serve_oldest_versions(self) -> None:
        """Advertise only the lowest version we serve of every API (an old broker):
        ApiVersions v0 too, so clients go through Kafka's v0 fallback."""
        self.version_caps = {int(k): (a.min_version, a.min_version) for k, a in APIS.items()}

    def served(self) -> dict[int, tuple[int, int]]:
        """The (min, max) version per API key this fake advertises in ApiVersions."""
        out = {}
        for key, api in APIS.items():
            if key == ApiKey.INIT_PRODUCER_ID and not self.serve_init_producer_id:
                continue
            if key in self.unserved:
                continue
            out[int(key)] = self.version_caps.get(key, (api.min_version, api.max_version))
        return out

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
                self.connections_accepted += 1
            t = threading.Thread(target=self._serve, args=(node_id, conn), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, node_id: int, conn: socket.socket) -> None:
        try:
            while True:
                frame = read_frame(conn)
                if frame is None:
                    return
                header = decode_request_header(frame)
                if header.api_key == ApiKey.API_VERSIONS:
                    if not self._api_versions(conn, header):
                        return
                    continue
                served = self.served().get(header.api_key)
                if served is None or not served[0] <= header.api_version <= served[1]:
                    raise MiniKafkaError(  # a client must not send what is not advertised
                        f"request for api {header.api_key} v{header.api_version}, "
                        f"advertised {served}"
                    )
                request = decode_request_body(header)
                version = request.api_version
                lose = False
                with self.cond:
                    self.request_log.append((node_id, int(request.api_key)))
                    self.version_log.append((int(request.api_key), version))
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
                body = self._handle(node_id, ApiKey(request.api_key), request.body, version)
                if lose:
                    if self.lose_forgets:
                        for t in request.body["topics"]:
                            for p in t["partitions"]:
                                self.forget_producer_state(TopicPartition(t["name"], p["index"]))
                    return
                if body is None:
                    continue
                send_buffers(
                    conn, encode_response(request.api_key, version, request.correlation_id, body)
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

    def _api_versions(self, conn: socket.socket, header: RequestHeader) -> bool:
        """Answer ApiVersions as Kafka does: at the version asked when served, else
        UNSUPPORTED_VERSION at v0 listing our ApiVersions range (the v0 fallback)."""
        served = self.served()
        low, high = served[int(ApiKey.API_VERSIONS)]
        table = [{"api_key": k, "min_version": lo, "max_version": hi}
                 for k, (lo, hi) in sorted(served.items())]  # fmt: skip
        with self.cond:
            self.version_log.append((int(ApiKey.API_VERSIONS), header.api_version))
        if not low <= header.api_version <= high:
            body = {"error_code": E.UNSUPPORTED_VERSION, "api_keys": [
                {"api_key": int(ApiKey.API_VERSIONS), "min_version": low, "max_version": high}]}
            send_buffers(conn, encode_response(ApiKey.API_VERSIONS, 0, header.correlation_id,
                                               body))  # fmt: skip
            return True
        request = decode_request_body(header)
        if request.api_version >= 3 and not request.body["client_software_name"]:
            body = {"error_code": E.INVALID_REQUEST, "api_keys": table}
        else:
            body = {"error_code": 0, "api_keys": table}
        send_buffers(conn, encode_response(ApiKey.API_VERSIONS, request.api_version,
                                           header.correlation_id, body))  # fmt: skip
        return True

    def _handle(
        self, node_id: int, api_key: ApiKey, body: dict[str, Any], version: int
    ) -> dict[str, Any] | None:
        """The answer to one request, in the shape of ``version`` (None: no answer)."""
        handler = {
            ApiKey.INIT_PRODUCER_ID: lambda: self._init_producer_id(body),
            ApiKey.METADATA: lambda: self._metadata(body, version),
            ApiKey.CREATE_TOPICS: lambda: self._create_topics(body, version),
            ApiKey.DELETE_TOPICS: lambda: self._delete_topics(body),
            ApiKey.CREATE_PARTITIONS: lambda: self._create_partitions(body),
            ApiKey.PRODUCE: lambda: self._produce(node_id, body),
            ApiKey.FETCH: lambda: self._fetch(node_id, body, version),
            ApiKey.LIST_OFFSETS: lambda: self._list_offsets(node_id, body),
            ApiKey.DELETE_RECORDS: lambda: self._delete_records(node_id, body),
            ApiKey.DESCRIBE_CONFIGS: lambda: self._describe_configs(body, version),
            ApiKey.ALTER_CONFIGS: lambda: self._alter_configs(body, incremental=False),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda: self._alter_configs(body, incremental=True),
            ApiKey.DESCRIBE_CLUSTER: lambda: self._describe_cluster(),
        }.get(api_key)
        if handler is None:
            raise MiniKafkaError(f"fake broker does not serve {api_key.name}")
        return handler()

    def _metadata(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        with self.cond:
            asked = body["topics"]
            if version == 0 and not asked:
                asked = None  # v0 has no null: an empty list means every topic
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
                configs = [{"name": k, "value": v}
                           for k, v in sorted(self.topic_configs.get(name, {}).items())]
                topics.append({"error_code": 0, "name": name, "partitions": parts,
                               "configs": configs, "topic_id": fake_topic_id(name)})
            return {
                "brokers": [
                    {"node_id": i, "host": "127.0.0.1", "port": self.port(i)}
                    for i in range(len(self.listeners))
                ],
                "cluster_id": "fake-cluster",
                "controller_id": 0,
                "topics": topics,
            }

    def _create_topics(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        out = []
        for t in body["topics"]:
            name, n, rf = t["name"], t["num_partitions"], t["replication_factor"]
            placed = {a["partition_index"]: a["broker_ids"] for a in t["assignments"]}
            n = (len(placed) or self.default_partitions) if n == -1 else n
            rf = (len(next(iter(placed.values()))) if placed else 1) if rf == -1 else rf
            configs = {c["name"]: c["value"] for c in t["configs"]}
            code, msg = 0, None
            with self.cond:
                reason = topic_name_error(name)
                bad = sorted(set(configs) - set(TOPIC_CONFIGS))
                if reason is not None:
                    code, msg = E.INVALID_TOPIC_EXCEPTION, reason
                elif name in self.topics:
                    code, msg = E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
                elif n <= 0:
                    code, msg = E.INVALID_PARTITIONS, f"num_partitions {n} must be > 0"
                elif not 0 < rf <= len(self.listeners):
                    code, msg = E.INVALID_REPLICATION_FACTOR, f"replication factor {rf}"
                elif bad:
                    code, msg = E.INVALID_CONFIG, f"unknown topic config(s) {bad}"
                elif placed and sorted(placed) != list(range(n)):
                    code, msg = E.INVALID_REPLICA_ASSIGNMENT, "assignments must cover 0..n-1"
                elif not body["validate_only"]:
                    self.create_topic(name, n, rf)
                    for index, replicas in placed.items():
                        self.topics[name][index] = FakePartition(replicas[0], list(replicas))
                    self.topic_configs[name] = {k: v for k, v in configs.items()
                                                if v is not None}  # fmt: skip
            result: dict[str, Any] = {"name": name, "error_code": code, "error_message": msg}
            if version >= 5 and not code:
                result.update(num_partitions=n, replication_factor=rf, configs=[
                    {"name": k, "value": configs.get(k, v), "config_source":
                     SOURCE_DYNAMIC_TOPIC if k in configs else SOURCE_DEFAULT}
                    for k, v in sorted(TOPIC_CONFIGS.items())])  # fmt: skip
            out.append(result)
        return {"topics": out}

    def _delete_topics(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            names = body.get("topic_names") or [t["name"] for t in body.get("topics", [])]
            for name in names:
                existed = self.topics.pop(name, None) is not None
                self.topic_configs.pop(name, None)
                code = 0 if existed else E.UNKNOWN_TOPIC_OR_PARTITION
                out.append({"name": name, "error_code": code,
                            "error_message": None if existed else f"no topic {name!r}"})
        return {"responses": out}

    def _create_partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            n = len(self.listeners)
            for t in body["topics"]:
                name, count, assignments = t["name"], t["count"], t["assignments"]
                parts = self.topics.get(name)
                code, msg = 0, None
                if parts is None:
                    code, msg = E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
                elif count <= len(parts):
                    code, msg = E.INVALID_PARTITIONS, (
                        f"topic {name!r} has {len(parts)} partitions, asked for {count}")
                elif assignments is not None and (
                        len(assignments) != count - len(parts)
                        or any(not a["broker_ids"] or not set(a["broker_ids"]) <= set(range(n))
                               for a in assignments)):  # fmt: skip
                    code, msg = E.INVALID_REPLICA_ASSIGNMENT, "bad assignments"
                elif not body["validate_only"]:
                    rf = len(parts[0].replicas)
                    for i in range(len(parts), count):
                        replicas = (assignments[i - len(parts)]["broker_ids"] if assignments
                                    else [(i + r) % n for r in range(rf)])  # fmt: skip
                        parts.append(FakePartition(replicas[0], list(replicas)))
                out.append({"name": name, "error_code": code, "error_message": msg})
        return {"results": out}

    def _describe_cluster(self) -> dict[str, Any]:
        return {"cluster_id": "fake-cluster", "controller_id": 0, "brokers": [
            {"broker_id": i, "host": "127.0.0.1", "port": self.port(i)}
            for i in range(len(self.listeners))]}  # fmt: skip

    def _config_entries(self, rtype: int, name: str) -> dict[str, tuple[str, int]]:
        """name -> (value, config source) of one resource (caller holds the lock)."""
        if rtype == RESOURCE_BROKER:
            return {k: (v, SOURCE_DYNAMIC_BROKER if v != BROKER_CONFIGS[k] else SOURCE_DEFAULT)
                    for k, v in self.broker_configs.items()}  # fmt: skip
        overrides = self.topic_configs.get(name, {})
        return {k: (overrides.get(k, v), SOURCE_DYNAMIC_TOPIC if k in overrides
                    else SOURCE_DEFAULT) for k, v in TOPIC_CONFIGS.items()}  # fmt: skip

    def _resource_error(self, rtype: int, name: str) -> tuple[int, str | None]:
        if rtype == RESOURCE_TOPIC:
            if name not in self.topics:
                return E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
            return 0, None
        if rtype == RESOURCE_BROKER:
            if name not in ("", *map(str, range(len(self.listeners)))):
                return E.INVALID_REQUEST, f"no broker {name!r}"
            return 0, None
        return E.INVALID_REQUEST, f"resource type {rtype} is not served"

    def _describe_configs(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        results = []
        with self.cond:
            for r in body["resources"]:
                rtype, name, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
                code, msg = self._resource_error(rtype, name)
                configs = []
                if not code:
                    entries = self._config_entries(rtype, name)
                    for k in sorted(entries if keys is None else set(keys) & set(entries)):
                        value, source = entries[k]
                        configs.append({"name": k, "value": value, "read_only": False,
                                        "config_source": source, "is_sensitive": False,
                                        "config_type": 2 if k in LIST_CONFIGS else 0,
                                        "documentation": f"the fake's {k}"
                                        if body["include_documentation"] else None})
                results.append({"error_code": code, "error_message": msg, "resource_type": rtype,
                                "resource_name": name, "configs": configs})  # fmt: skip
        return {"results": results}

    def _alter_configs(self, body: dict[str, Any], incremental: bool) -> dict[str, Any]:
        out = []
        with self.cond:
            for r in body["resources"]:
                rtype, name = r["resource_type"], r["resource_name"]
                code, msg = self._resource_error(rtype, name)
                known = BROKER_CONFIGS if rtype == RESOURCE_BROKER else TOPIC_CONFIGS
                if not code:
                    bad = sorted({c["name"] for c in r["configs"]} - set(known))
                    if bad:
                        code, msg = E.INVALID_CONFIG, f"unknown config(s) {bad}"
                if not code:
                    current = (self.broker_configs if rtype == RESOURCE_BROKER
                               else self.topic_configs.setdefault(name, {}))  # fmt: skip
                    new = dict(current) if incremental else {}
                    if rtype == RESOURCE_BROKER and not incremental:
                        new = dict(BROKER_CONFIGS)
                    for c in r["configs"]:
                        op = c.get("config_operation", 0) if incremental else 0
                        key, value = c["name"], c["value"]
                        default = (BROKER_CONFIGS if rtype == RESOURCE_BROKER
                                   else TOPIC_CONFIGS)[key]  # fmt: skip
                        items = [v for v in new.get(key, default).split(",") if v]
                        if op == 0 and value is not None:
                            new[key] = value
                        elif op == 1 or value is None:
                            new.pop(key, None)
                            if rtype == RESOURCE_BROKER:
                                new[key] = default
                        elif op in (2, 3) and key not in LIST_CONFIGS:
                            code, msg = E.INVALID_CONFIG, f"{key} is not a list"
                        elif op == 2:
                            new[key] = ",".join(items + [v for v in value.split(",")
                                                         if v not in items])  # fmt: skip
                        elif op == 3:
                            new[key] = ",".join(v for v in items if v not in value.split(","))
                        else:
                            code, msg = E.INVALID_REQUEST, f"config operation {op}"
                    if not code and not body["validate_only"]:
                        current.clear()
                        current.update(new)
                out.append({"error_code": code, "error_message": msg, "resource_type": rtype,
                            "resource_name": name})  # fmt: skip
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
                    if part is not None:
                        self.produced_records.append((tp, bytes(p["records"] or b"")))
                    limit = int(self.topic_configs.get(tp.topic, {}).get("max.message.bytes", 0))
                    if forced is not None:
                        code = forced
                    elif part is not None and limit and any(
                            h.size_in_bytes > limit for _, h in iter_batches(p["records"] or b"")):
                        code, msg = E.MESSAGE_TOO_LARGE, f"a batch is above {limit} bytes"
                        self.too_large_answers += 1
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

    def _fetch(self, node_id: int, body: dict[str, Any], version: int) -> dict[str, Any]:
        deadline = time.monotonic() + body["max_wait_ms"] / 1000
        # a full fetch (no session, or asking for one: KIP-227), answered sessionless
        # (session_id 0, as Kafka when its cache is full), from replica -1
        if (body["session_id"] != 0 or body["session_epoch"] not in (0, -1)
                or body["replica_id"] != -1):
            raise MiniKafkaError("a consumer's Fetch must be full (session 0, epoch 0 or "
                                 f"-1) from replica -1, got {body['session_id']}, "
                                 f"{body['session_epoch']}, {body['replica_id']}")
        with self.cond:
            self.fetch_isolation_levels.append(body["isolation_level"])
            while True:
                responses, total = self._fetch_once(node_id, body, version)
                remaining = deadline - time.monotonic()
                if total >= body["min_bytes"] or remaining <= 0 or self._stopping:
                    self.fetch_requests += 1
                    return {"responses": responses}
                self.cond.wait(remaining)

    def _fetch_once(self, node_id: int, body: dict[str, Any],
                    version: int) -> tuple[list[Any], int]:
        out, total, budget = [], 0, body["max_bytes"]
        by_id = {fake_topic_id(name): name for name in self.topics} if version >= 13 else {}
        for t in body["topics"]:
            results = []
            name = by_id.get(t["topic_id"], "") if version >= 13 else t["name"]
            for p in t["partitions"]:
                part, code = self._partition(node_id, name, p["partition"])
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
            out.append({"name": name, "topic_id": t.get("topic_id"), "partitions": results})
        return out, total

    def _list_offsets(self, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            for t in body["topics"]:
                results = []
                for p in t["partitions"]:
                    part, code = self._partition(node_id, t["name"], p["partition_index"])
                    offset, timestamp = -1, -1
                    if part is not None:
                        ts = p["timestamp"]
                        if ts == -1:
                            offset = part.log_end_offset
                        elif ts == -2:
                            offset = part.log_start_offset
                        elif ts == -3:
                            offset, timestamp = self._max_timestamp(part)
                        elif ts < 0:
                            code = E.INVALID_REQUEST
                        else:
                            offset, timestamp = self._offset_for_time(part, ts)
                    results.append({"partition_index": p["partition_index"], "error_code": code,
                                    "timestamp": timestamp, "offset": offset,
                                    "leader_epoch": 0 if offset >= 0 else -1})  # fmt: skip
                out.append({"name": t["name"], "partitions": results})
        return {"topics": out}

    def _delete_records(self, node_id: int, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        with self.cond:
            for t in body["topics"]:
                results = []
                for p in t["partitions"]:
                    part, code = self._partition(node_id, t["name"], p["partition_index"])
                    low = -1
                    if part is not None:
                        offset = part.log_end_offset if p["offset"] == -1 else p["offset"]
                        if not 0 <= offset <= part.log_end_offset:
                            code = E.OFFSET_OUT_OF_RANGE
                        else:
                            part.log_start_offset = max(part.log_start_offset, offset)
                            part.batches = [b for b in part.batches if next(iter_batches(
                                b, validate=False))[1].next_offset > part.log_start_offset]
                            low = part.log_start_offset
                    results.append({"partition_index": p["partition_index"],
                                    "low_watermark": low, "error_code": code})  # fmt: skip
                out.append({"name": t["name"], "partitions": results})
        return {"topics": out}

    @staticmethod
    def _max_timestamp(part: FakePartition) -> tuple[int, int]:
        best = (-1, -1)  # offset, timestamp
        for b in part.batches:
            for r in decode_batch(b):
                if r.offset >= part.log_start_offset and r.timestamp > best[1]:
                    best = (r.offset, r.timestamp)
        return best

    @staticmethod
    def _offset_for_time(part: FakePartition, ts: int) -> tuple[int, int]:
        """Kafka: the first offset whose timestamp is at or after ``ts``; -1, -1 if none."""
        for b in part.batches:
            for r in decode_batch(b):
                if r.offset >= part.log_start_offset and r.timestamp >= ts:
                    return r.offset, r.timestamp
        return -1, -1
