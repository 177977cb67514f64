"""A real broker (main + network process) on 127.0.0.1, driven by the Python client."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.framing import read_frame
from clients.protocol.registry import APIS
from clients.protocol.topics import TopicPartition
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess, wait_until

pytestmark = pytest.mark.multiprocess

SMALL_SEGMENTS = {"segment_bytes": 256 * 1024}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path / "broker", overrides=SMALL_SEGMENTS) as b:
        yield b


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 1, {})])


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                timeout_s: float = 60.0) -> dict[int, list]:
    out: dict[int, list] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=1024 * 1024) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        def done() -> bool:
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition].extend(records)
            return sum(map(len, out.values())) >= expected

        wait_until(done, timeout_s, f"{expected} records from {topic}", interval_s=0)
    return out


def test_round_trip_100k_records_with_keys_headers_nulls_across_rolls(
        broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "roundtrip", 3)
    sent: dict[int, list[tuple]] = {0: [], 1: [], 2: []}
    with Producer(broker.bootstrap, acks=1, linger_ms=20, batch_size=64 * 1024) as producer:
        futures = []
        for i in range(100_000):
            key = None if i % 7 == 0 else f"k{i % 101}".encode()
            value = None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 3)
            headers = (("i", str(i).encode()),) if i % 5 == 0 else ()
            futures.append(((key, value, headers), producer.send("roundtrip", value, key=key,
                                                                headers=list(headers))))
        producer.flush()
        for record, future in futures:
            meta = future.result()
            sent[meta.partition].append((meta.offset, *record))
    received = consume_all(broker.bootstrap, "roundtrip", 3, 100_000)
    for p in range(3):
        got = [(r.offset, r.key, r.value, tuple(r.headers)) for r in received[p]]
        assert got == sorted(sent[p]), f"partition {p} differs"
    segments = [f for p in range(3) for f in os.listdir(broker.data_dir / f"roundtrip-{p}")
                if f.endswith(".log")]
    assert len(segments) > 3, "the test must cross segment rolls"


def _raw_request(sock: socket.socket, api: ApiKey, body: dict, correlation_id: int,
                 version: int) -> None:
    sock.sendall(encode_request_bytes(api, version, correlation_id, "raw", body))


def _fetch_body(topic: str, offset: int, max_wait_ms: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "session_epoch": -1, "topics": [{"name": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


# by name: v13+ names topics by id, which a standalone broker's topics do not have
FETCH_VERSIONS = [APIS[ApiKey.FETCH].min_version, 12]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_waits_in_purgatory_until_data_arrives(broker: BrokerProcess,
                                                     version: int) -> None:
    create_topic(broker.bootstrap, "waiting", 1)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=60) as sock:
        # max_wait of 10 minutes: only the arrival of data can answer it within the test.
        _raw_request(sock, ApiKey.FETCH, _fetch_body("waiting", 0, 600_000), 1, version)
        with Producer(broker.bootstrap, acks=1) as producer:
            producer.send("waiting", b"wake up", partition=0).result(30)
        sock.settimeout(30)
        frame = read_frame(sock)
        assert frame is not None
        body = decode_response(frame, ApiKey.FETCH, version).body
        part = body["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["high_watermark"] == 1
        assert bytes(part["records"]).find(b"wake up") > 0


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_returns_empty_at_max_wait(broker: BrokerProcess, version: int) -> None:
    create_topic(broker.bootstrap, "quiet", 1)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        _raw_request(sock, ApiKey.FETCH, _fetch_body("quiet", 0, 300), 7, version)
        frame = read_frame(sock)
        assert frame is not None
        response = decode_response(frame, ApiKey.FETCH, version)
        assert response.correlation_id == 7
        part = response.body["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and len(part["records"]) == 0


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_acknowledged_data(tmp_path: Path, how: str) -> None:
    broker = BrokerProcess(tmp_path / "b", overrides=SMALL_SEGMENTS).start()
    try:
        create_topic(broker.bootstrap, "durable", 2)
        with Producer(broker.bootstrap, acks="all") as producer:
            metas = [producer.send("durable", f"m{i}".encode(), key=str(i).encode())
                     for i in range(20_000)]
            producer.flush()
            acked = {(m.result().partition, m.result().offset) for m in metas}
        if how == "sigterm":
            assert broker.stop() == 0
            assert (broker.data_dir / ".kafka_cleanshutdown").exists()
        else:
            broker.kill()
        broker.start()
        received = consume_all(broker.bootstrap, "durable", 2, len(acked))
        got = {(p, r.offset) for p, records in received.items() for r in records}
        assert acked <= got
    finally:
        broker.stop()


def test_network_process_killed_mid_stream_loses_no_acknowledged_data(
        broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "resilient", 1)
    (old_pid,) = broker.network_pids()
    acked: list[bytes] = []
    with Producer(broker.bootstrap, acks=1, linger_ms=1, retry_backoff_ms=50) as producer:
        for round_ in range(20):
            futures = [(v, producer.send("resilient", v, partition=0))
                       for v in (f"r{round_}-{i}".encode() for i in range(500))]
            if round_ == 10:
                os.kill(old_pid, signal.SIGKILL)
            producer.flush()
            acked.extend(v for v, f in futures if f.exception() is None)
    wait_until(lambda: broker.network_pids() not in ([], [old_pid]), 30,
               "a restarted network process")
    received = consume_all(broker.bootstrap, "resilient", 1, len(acked))
    values = [r.value for r in received[0]]
    assert set(acked) <= set(values)  # at-least-once without idempotence
    assert len(acked) >= 9_000  # the producer kept going through the restart


def test_batches_refused_as_too_large_are_split_and_land_once_in_order(
        broker: BrokerProcess) -> None:
    # the topic takes batches of at most 4 KiB; the producer's batches are 16 KiB and grow
    # to 256 KiB behind a backlog: the broker refuses them (MESSAGE_TOO_LARGE) and the
    # producer splits them (clients/producer/split.py), keeping its sequences
    values = _small_topic(broker, "small")
    with Producer(broker.bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
                  retry_backoff_ms=5) as producer:  # fmt: skip
        futures = [producer.send("small", v, key=v[:6]) for v in values]
        producer.flush()
        offsets = [f.result(0).offset for f in futures]
        splits = producer.metrics()["split_batches"]
    assert splits > 0
    assert offsets == list(range(len(values)))
    _assert_landed_once_in_order(broker, "small", values)


def test_send_bulk_batches_refused_as_too_large_are_split_and_land_once_in_order(
        broker: BrokerProcess) -> None:
    # send_bulk's batches are the producer's batch_size (16 KiB), four times the topic's
    # limit: each is split (clients/producer/split.py) and the call's result lists the parts
    values = _small_topic(broker, "small-bulk")
    with Producer(broker.bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                  retry_backoff_ms=5) as producer:  # fmt: skip
        result = producer.send_bulk("small-bulk", values, partition=0,
                                    keys=[v[:6] for v in values]).result(60)
        splits = producer.metrics()["split_batches"]
    assert splits > 0
    assert sum(result.record_counts) == len(values)
    assert result.base_offsets == [sum(result.record_counts[:i])
                                   for i in range(len(result.record_counts))]
    _assert_landed_once_in_order(broker, "small-bulk", values)


def _small_topic(broker: BrokerProcess, name: str) -> list[bytes]:
    """Create ``name`` taking batches of at most 4 KiB; 20,000 values of 100 B for it."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, 1, 1, {"max.message.bytes": "4096"})])
    return [b"%06d" % i + bytes(94) for i in range(20_000)]


def _assert_landed_once_in_order(broker: BrokerProcess, name: str, values: list[bytes]) -> None:
    received = consume_all(broker.bootstrap, name, 1, len(values))
    assert [r.value for r in received[0]] == values  # each once, in send order
