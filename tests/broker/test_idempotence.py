"""Idempotent produce on the broker: retries are not duplicated, errors are precise,
producer state survives restarts (SIGTERM and SIGKILL) and a leader change.

The first tests drive a :class:`BrokerCore` directly with a manual clock (the acks=all
purgatory case needs a follower the test controls); the others run real processes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig
from broker.controller.state import ControllerState
from broker.core import BrokerCore
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecord,
    MetadataRecordError,
    ProducerIdsRecord,
    decode_record,
    encode_record,
)
from broker.producer_ids import (
    BLOCK_FILE,
    PRODUCER_ID_BLOCK_SIZE,
    ControllerProducerIdAllocator,
    StandaloneProducerIdAllocator,
)
from clients.admin import Admin
from clients.network.connection import BrokerConnection
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.framing import read_frame
from clients.protocol.registry import APIS
from clients.records.batch import iter_batches
from clients.records.record import build_batch, decode_batch
from clients.types import NewTopic
from storage.producer_snapshot import list_snapshot_offsets
from tests.broker.cluster_harness import LocalCluster
from tests.broker.handlers import wire
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.test_cluster import all_in_sync
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

TOPIC = "idem"
PRODUCE_LOW = APIS[ApiKey.PRODUCE].min_version
PRODUCE_HIGH = APIS[ApiKey.PRODUCE].max_version


def idem_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return build_batch([(None, v, 1_000_000 + i, ()) for i, v in enumerate(values)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def produce_body(records: bytes, acks: int = -1, partition: int = 0) -> dict[str, Any]:
    return {"acks": acks, "timeout_ms": 30_000,
            "topics": [{"name": TOPIC, "partitions": [{"index": partition,
                                                       "records": records}]}]}


def first_partition(body: dict[str, Any]) -> dict[str, Any]:
    return body["responses"][0]["partition_responses"][0]


def stored_values(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_batch(data, pos)]


# -- a BrokerCore with a manual clock ---------------------------------------------------


@pytest.fixture
def core(tmp_path: Path) -> Iterator[BrokerCore]:
    clock = ManualClock()
    c = BrokerCore(BrokerConfig(node_id=0, data_dir=str(tmp_path / "b0")), clock,
                   SystemTimer(clock))
    c.startup()
    c.create_topic(c.validate_new_topic(TOPIC, 1, 1, {}))
    try:
        yield c
    finally:
        c.shutdown()


def call(core: BrokerCore, api: ApiKey, body: dict[str, Any]) -> list[dict[str, Any] | None]:
    """Run the handler at our highest version; the list fills with the answers (as a
    client reads them) whenever they come."""
    return wire.call(core, api, body)


def test_retry_while_the_original_waits_for_the_isr_is_answered_once_committed(
        core: BrokerCore) -> None:
    partition = core.partitions[(TOPIC, 0)]
    partition.make_leader(1, [0, 1], [0, 1])  # follower 1 (driven by this test) in the ISR
    data = idem_batch(9, 0, 0, b"a", b"b")
    original = call(core, ApiKey.PRODUCE, produce_body(data))
    retry = call(core, ApiKey.PRODUCE, produce_body(data))
    assert original == [] and retry == []  # both wait for the follower
    assert partition.log_end_offset == 2  # one copy
    partition.update_follower_fetch(1, 2, core.clock.now_ms())
    core.wake_partition((TOPIC, 0))
    assert original[0] is not None and retry[0] is not None
    assert first_partition(original[0])["error_code"] == 0
    assert first_partition(retry[0]) == first_partition(original[0])
    assert first_partition(retry[0])["base_offset"] == 0
    # committed and still in the last five: answered at once
    again = call(core, ApiKey.PRODUCE, produce_body(data))
    assert again[0] is not None and first_partition(again[0])["base_offset"] == 0


def test_duplicate_below_the_log_start_still_gets_its_original_offset(
        core: BrokerCore) -> None:
    partition = core.partitions[(TOPIC, 0)]
    first = idem_batch(9, 0, 0, b"gone")
    call(core, ApiKey.PRODUCE, produce_body(first))
    call(core, ApiKey.PRODUCE, produce_body(idem_batch(9, 0, 1, b"kept")))
    partition.log.maybe_increment_log_start_offset(1)  # DeleteRecords-style
    answer = call(core, ApiKey.PRODUCE, produce_body(first))[0]
    assert answer is not None
    assert (first_partition(answer)["error_code"], first_partition(answer)["base_offset"]) \
        == (0, 0)
    assert partition.log_end_offset == 2


def test_errors_are_per_partition_with_the_contract_codes(core: BrokerCore) -> None:
    cases = [
        (idem_batch(9, 0, 3, b"x"), ErrorCode.UNKNOWN_PRODUCER_ID),
        (idem_batch(9, 0, 0, b"x"), ErrorCode.NONE),
        (idem_batch(9, 0, 2, b"x"), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (idem_batch(9, 1, 5, b"x"), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (idem_batch(9, 1, 0, b"x"), ErrorCode.NONE),
        (idem_batch(9, 0, 1, b"x"), ErrorCode.INVALID_PRODUCER_EPOCH),
    ]
    for data, code in cases:
        answer = call(core, ApiKey.PRODUCE, produce_body(data))[0]
        assert answer is not None
        result = first_partition(answer)
        assert result["error_code"] == code, (code, result)
        if code:
            assert result["base_offset"] == -1 and "producer 9" in result["error_message"]
    assert core.partitions[(TOPIC, 0)].log_end_offset == 2


def test_init_producer_id_standalone_new_ids_bumps_and_bad_requests(
        core: BrokerCore, tmp_path: Path) -> None:
    def init(**fields: Any) -> dict[str, Any]:
        body = {"transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1,
                "producer_epoch": -1, **fields}
        answer = call(core, ApiKey.INIT_PRODUCER_ID, body)[0]
        assert answer is not None
        return answer

    a, b = init(), init()
    assert (a["error_code"], a["producer_epoch"], b["producer_epoch"]) == (0, 0, 0)
    assert b["producer_id"] == a["producer_id"] + 1
    bumped = init(producer_id=a["producer_id"], producer_epoch=0)
    assert (bumped["producer_id"], bumped["producer_epoch"]) == (a["producer_id"], 1)
    exhausted = init(producer_id=a["producer_id"], producer_epoch=32767)
    assert exhausted["producer_epoch"] == 0 and exhausted["producer_id"] > b["producer_id"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"producer_epoch": 3}, "needs producer_epoch -1"),
        ({"producer_id": 5}, "producer_epoch must be in"),
        ({"producer_id": -2}, "must be -1 (new) or >= 0")]
    for bad, reason in cases:
        answer = init(**bad)
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST and reason in \
            answer["error_message"]
        assert (answer["producer_id"], answer["producer_epoch"]) == (-1, -1)
    # a transactional id is the transaction coordinator's (none before its state topic)
    assert init(transactional_id="tx", transaction_timeout_ms=60_000)["error_code"] == \
        ErrorCode.NOT_COORDINATOR
    # the block is on disk before its ids are used: a new allocator starts after it
    again = StandaloneProducerIdAllocator(tmp_path / "b0")
    assert again.next_id_now() == PRODUCER_ID_BLOCK_SIZE


def test_corrupt_block_file_is_a_precise_storage_error(core: BrokerCore,
                                                        tmp_path: Path) -> None:
    (tmp_path / "b0" / BLOCK_FILE).write_text("0\nlots\n")
    core.producer_ids = StandaloneProducerIdAllocator(tmp_path / "b0")
    answer = call(core, ApiKey.INIT_PRODUCER_ID, {
        "transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1,
        "producer_epoch": -1})[0]
    assert answer is not None and answer["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert BLOCK_FILE in answer["error_message"] and "'lots'" in answer["error_message"]


def test_controller_allocator_prefetches_and_maps_failures() -> None:
    blocks: list[Any] = [(0, 4), MiniKafkaError("down", ErrorCode.NETWORK_EXCEPTION), (100, 4)]
    calls = 0

    async def request_block() -> tuple[int, int]:
        nonlocal calls
        calls += 1
        item = blocks.pop(0)
        if isinstance(item, MiniKafkaError):
            raise item
        return item

    async def refused() -> tuple[int, int]:
        raise MiniKafkaError("controller: broker 0 epoch 5: broker is at epoch 7",
                             ErrorCode.STALE_BROKER_EPOCH)

    async def scenario() -> list[int]:
        ids = ControllerProducerIdAllocator(request_block, prefetch_ratio=0.5,
                                            retry_backoff_ms=1)
        assert ids.next_id_now() is None  # no block yet: a fetch starts
        got = [await ids.next_id(5_000) for _ in range(6)]  # prefetch fails once, retried
        assert calls == 3 and ids.last_error is not None
        await ids.close()
        stale = ControllerProducerIdAllocator(refused, retry_backoff_ms=1)
        with pytest.raises(MiniKafkaError) as exc:
            await stale.next_id(50)
        assert exc.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert "STALE_BROKER_EPOCH" in exc.value.message
        await stale.close()
        return got

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 100, 101]


# -- the controller's blocks -------------------------------------------------------------


def test_controller_hands_out_disjoint_blocks_that_survive_a_snapshot() -> None:
    state = ControllerState(ControllerConfig().validate(), ManualClock(1_000))
    log: list[MetadataRecord] = []
    epochs = {}
    for broker_id in (0, 1):
        result, records = state.register_broker(broker_id, f"inc-{broker_id}", "127.0.0.1",
                                                9000 + broker_id)
        epochs[broker_id] = result.broker_epoch
        log += records
    blocks = []
    for broker_id in (0, 1, 0):
        result, records = state.allocate_producer_ids(broker_id, epochs[broker_id])
        assert result.error == ErrorCode.NONE and len(records) == 1
        log += records
        blocks.append((result.producer_id_start, result.producer_id_len))
    assert blocks == [(0, PRODUCER_ID_BLOCK_SIZE), (1000, 1000), (2000, 1000)]
    stale, records = state.allocate_producer_ids(1, epochs[1] + 7)
    assert stale.error == ErrorCode.STALE_BROKER_EPOCH and not records
    assert "broker 1 epoch" in (stale.message or "")
    # a restarted controller (snapshot or log replay) continues after the last block
    restored = MetadataImage.decode_snapshot(state.image.encode_snapshot())
    assert restored == state.image and restored.next_producer_id == 3000
    replayed = MetadataImage()
    for offset, record in enumerate(log):
        replayed.apply(decode_record(encode_record(record)), offset)
    assert replayed.next_producer_id == 3000
    with pytest.raises(MetadataRecordError, match="not above the current 3000"):
        replayed.apply(ProducerIdsRecord(0, epochs[0], 2000), len(log))


# -- a real standalone broker ----------------------------------------------------------


def connect(port: int) -> BrokerConnection:
    conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=30_000)
    conn.connect()
    return conn


def init_producer_id(conn: BrokerConnection, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
    body = conn.request(ApiKey.INIT_PRODUCER_ID, {"producer_id": pid, "producer_epoch": epoch})
    assert body["error_code"] == 0, body
    return body["producer_id"], body["producer_epoch"]


def produce(conn: BrokerConnection, data: bytes) -> tuple[int, int]:
    """(error_code, base_offset) of a one-partition acks=all produce."""
    result = first_partition(conn.request(ApiKey.PRODUCE, produce_body(data)))
    return result["error_code"], result["base_offset"]


def log_end_offset(conn: BrokerConnection) -> int:
    body = conn.request(ApiKey.LIST_OFFSETS, {"topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "timestamp": -1}]}]})
    return body["topics"][0]["partitions"][0]["offset"]


def read_all(conn: BrokerConnection) -> list[tuple[int, bytes | None]]:
    body = conn.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
    return stored_values(bytes(body["responses"][0]["partitions"][0]["records"]))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker") as b:
        with Admin(b.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1, {})])
        yield b


@pytest.mark.multiprocess
def test_retried_produce_after_a_lost_response_is_not_duplicated(
        broker: BrokerProcess) -> None:
    conn = connect(broker.port)
    try:
        pid, epoch = init_producer_id(conn)
        data = idem_batch(pid, epoch, 0, b"once", b"only")
        # the first attempt's response is lost: the connection dies before it is read
        with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as lost:
            lost.sendall(encode_request_bytes(ApiKey.PRODUCE, PRODUCE_LOW, 1, "lost",
                                              produce_body(data)))
        wait_until(lambda: log_end_offset(conn) == 2, 30, "the first attempt appended")
        assert produce(conn, data) == (0, 0)  # the retry: same batch bytes
        # the same bytes twice on one connection: both answers carry the same offset
        second = idem_batch(pid, epoch, 2, b"twice")
        with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
            for correlation_id in (7, 8):
                sock.sendall(encode_request_bytes(ApiKey.PRODUCE, PRODUCE_HIGH, correlation_id,
                                                  "raw", produce_body(second)))
            answers = []
            for _ in range(2):
                frame = read_frame(sock)
                assert frame is not None
                answers.append(first_partition(
                    decode_response(frame, ApiKey.PRODUCE, PRODUCE_HIGH).body))
        assert [(a["error_code"], a["base_offset"]) for a in answers] == [(0, 2), (0, 2)]
        assert read_all(conn) == [(0, b"once"), (1, b"only"), (2, b"twice")]
    finally:
        conn.close()


@pytest.mark.multiprocess
def test_producer_state_survives_sigterm_and_sigkill_restarts(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    # small segments: every roll snapshots the producer state; no periodic snapshot, so
    # after SIGKILL the state is the last roll's snapshot plus a replay of the log (after
    # SIGTERM: the shutdown's snapshot at the log end)
    overrides: dict[str, object] = {"segment_bytes": 1024,
                                    "checkpoint_interval_ms": 3_600_000}
    partition_dir = data_dir / f"{TOPIC}-0"
    broker = BrokerProcess(data_dir, overrides=overrides).start()
    try:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 1, {})])
        conn = connect(broker.port)
        pid, epoch = init_producer_id(conn)
        seen_ids = [pid]
        sent: list[tuple[bytes, int]] = []
        for how in ("sigterm", "sigkill"):
            for seq in range(len(sent), len(sent) + 12):
                data = idem_batch(pid, epoch, seq, b"v%d" % seq + b"." * 200)
                code, offset = produce(conn, data)
                assert (code, offset) == (0, seq)
                sent.append((data, offset))
            conn.close()
            snapshots = list_snapshot_offsets(partition_dir)
            assert snapshots and snapshots[-1] < len(sent)  # the rest is in the log only
            if how == "sigkill":
                broker.kill()
            else:
                broker.stop()
            broker = BrokerProcess(data_dir, overrides=overrides).start()
            conn = connect(broker.port)
            for data, offset in sent[-5:]:  # the last five batches, retried: duplicates
                assert produce(conn, data) == (0, offset), how
            assert produce(conn, sent[-6][0])[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            seen_ids.append(init_producer_id(conn)[0])
            assert seen_ids[-1] > max(seen_ids[:-1]), how  # the block file survived
            assert log_end_offset(conn) == len(sent)
        assert init_producer_id(conn, pid, epoch) == (pid, epoch + 1)
        assert produce(conn, idem_batch(pid, epoch + 1, 0, b"new epoch")) == (0, 24)
        assert produce(conn, idem_batch(pid, epoch, 24, b"zombie"))[0] == \
            ErrorCode.INVALID_PRODUCER_EPOCH
        assert log_end_offset(conn) == 25
        conn.close()
    finally:
        broker.stop()


# -- a 3-broker cluster: leader change, ids unique in the cluster ----------------------


def try_init_producer_id(port: int) -> int | None:
    conn = connect(port)
    try:
        body = conn.request(ApiKey.INIT_PRODUCER_ID, {"producer_id": -1, "producer_epoch": -1})
    finally:
        conn.close()
    if body["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:  # no block yet
        return None
    assert body["error_code"] == 0, body
    return body["producer_id"]


def init_on(port: int) -> int:
    got: list[int] = []

    def attempt() -> bool:
        pid = try_init_producer_id(port)
        if pid is not None:
            got.append(pid)
        return bool(got)

    wait_until(attempt, 60, f"InitProducerId answered by the broker on port {port}", 0.2)
    return got[0]


def on_leader(cluster: LocalCluster, action: Any, what: str) -> Any:
    """``action(conn)`` on the partition's current leader, again while leadership moves
    (an answer of NOT_LEADER_OR_FOLLOWER, a broker that just died)."""
    out: list[Any] = []

    def attempt() -> bool:
        leader = str(cluster.partition(TOPIC, 0)["leader"])
        if leader == "-1":
            return False
        conn = BrokerConnection("127.0.0.1", cluster.state.brokers[leader].port,
                                request_timeout_ms=10_000)
        try:
            result = action(conn)
        except MiniKafkaError:  # connection refused / lost: the metadata is behind
            return False
        finally:
            conn.close()
        if isinstance(result, tuple) and result[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            return False
        out.append(result)
        return True

    wait_until(attempt, 60, what, 0.1)
    return out[0]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_leader_change_keeps_producer_state_and_ids_stay_unique(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, 3, {"replica_lag_time_max_ms": 1500}) as cluster:
        with Admin(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1, 3, {"min_insync_replicas": "2"})])
        cluster.wait_partition(TOPIC, 0, all_in_sync, "all replicas in sync", 60)
        ports = {name: info.port for name, info in cluster.state.brokers.items()}
        ids = [init_on(port) for port in ports.values() for _ in range(2)]
        assert len(set(ids)) == len(ids), f"producer ids handed out twice: {ids}"
        pid, epoch = init_on(ports["0"]), 0
        sent = [idem_batch(pid, epoch, seq, b"r%d" % seq) for seq in range(6)]
        for seq in range(5):
            assert on_leader(cluster, lambda c, d=sent[seq]: produce(c, d), "ack") == (0, seq)
        leader = str(cluster.partition(TOPIC, 0)["leader"])
        cluster.kill(leader)
        cluster.wait_partition(TOPIC, 0, lambda q: str(q["leader"]) not in (leader, "-1"),
                               "a new leader")
        # the last acknowledged batch, retried on the new leader: a duplicate
        assert on_leader(cluster, lambda c: produce(c, sent[4]), "retry answered") == (0, 4)
        assert on_leader(cluster, lambda c: produce(c, sent[2]), "older retry") == (0, 2)
        assert on_leader(cluster, lambda c: produce(c, sent[5]), "next batch") == (0, 5)
        assert on_leader(cluster, read_all, "read back") == [(i, b"r%d" % i) for i in range(6)]
        # the controller's blocks survive its restart: a broker asking again gets new ids
        cluster.restart("controller")
        cluster.restart(leader)
        fresh = init_on(ports[leader])
        assert fresh not in ids and fresh > max([*ids, pid])
