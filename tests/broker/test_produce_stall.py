"""One Produce must not stall a real broker's event loop (issue 30 item 7).

Reported: one Produce of 4 zstd batches of 1,000,000 tiny records each (0.8 MiB on the
wire, 9 MiB inflated, per batch) held the leader's event loop for 1.55 s (another
client's ApiVersions waited that long) and grew its RSS by 228 MiB: the leader's record
check ran there, whatever the batch claimed.  Now a batch's record count is bounded from
its header before decompression (``max_batch_records``: MESSAGE_TOO_LARGE), what a
request may cost is budgeted, and a check too large for the loop finishes on the
record-check thread while other clients are served.  Measured here on a real broker
process: another client's ApiVersions round trips during the Produce (a spawned
pinger, :class:`tests.broker.raw_kafka.LoopProbe`) and the broker's RSS at its peak.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.protocol.errors import ErrorCode
from clients.records.bulk_encode import encode_batch_bulk
from clients.records.compression import ZSTD
from clients.records.record import build_batch
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import LoopProbe, call, closed_by_peer, connect, recv_frame, request
from tests.clients.records.strategies import fix_crc

pytestmark = pytest.mark.multiprocess
MiB = 1 << 20
PRODUCE_V = 9
# Today's code held the loop ~1 s for each of the heavy requests below on this 2-core
# machine; with the fix the slowest ping was ~20 ms.  The bound leaves room for a busy
# machine and still fails when the loop is held by the check.
MAX_PING_S = 0.25


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("stall")
    (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": {
        "t": {"num_partitions": 4, "replication_factor": 1, "configs": {}}}}))
    with BrokerProcess(data_dir) as process:
        yield process


def tiny_records(n: int) -> bytes:
    """``n`` records whose values alternate between empty and one byte (so the check
    cannot take a single run: its slow path), zstd: the reported attack's batches."""
    values = [b"", b"x"] * (n // 2)
    return encode_batch_bulk(values, timestamps=int(time.time() * 1000), compression=ZSTD)


def produce_while_probing(broker: BrokerProcess, batches: list[bytes]
                          ) -> tuple[list[dict[str, Any]], float, float]:
    """One Produce (acks=1, a batch per partition) while another client pings:
    (partition answers, slowest ping in seconds, peak RSS growth of the broker in MiB)."""
    frame = request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": i, "records": b}
                                         for i, b in enumerate(batches)]}]})
    main = psutil.Process(broker.pid)
    before = main.memory_info().rss
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], main.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    with connect(broker.port, timeout_s=120) as sock, LoopProbe(broker.port) as probe:
        sampler.start()
        started = time.time()
        sock.sendall(frame)
        answer = recv_frame(sock)
        ended = time.time()
        done.set()
        probe.stop()
    sampler.join()
    body = decode_response(answer, ApiKey.PRODUCE, PRODUCE_V).body
    partitions = [p for t in body["responses"] for p in t["partition_responses"]]
    worst = probe.worst(started, ended)
    print(f"answered in {(ended - started) * 1000:.0f} ms, slowest ApiVersions meanwhile "
          f"{worst * 1000:.1f} ms, RSS peak +{(peak[0] - before) / MiB:.1f} MiB")
    return partitions, worst, (peak[0] - before) / MiB


def test_batches_of_a_million_tiny_records_are_refused_without_holding_the_loop(
        broker: BrokerProcess) -> None:
    batch = tiny_records(1_000_000)
    assert len(batch) < MiB  # within max_message_bytes: only its record count is over
    partitions, worst, rss_mib = produce_while_probing(broker, [batch] * 4)
    assert worst < MAX_PING_S, f"another client waited {worst:.3f} s"  # was ~1 s
    assert rss_mib < 32, f"RSS grew {rss_mib:.0f} MiB"  # was +232 MiB
    assert [p["error_code"] for p in partitions] == [ErrorCode.MESSAGE_TOO_LARGE] * 4
    assert "holds 1000000 records, above max_batch_records 65536" in partitions[0][
        "error_message"]


def test_heavy_checks_within_the_bounds_leave_the_loop_to_other_clients(
        broker: BrokerProcess) -> None:
    """4 batches of 65,536 records with 3 headers each: about the whole default budget
    of a request (max_produce_records: 1,048,576 records + headers), all on the slow
    paths; accepted, checked on the record-check thread."""
    now = int(time.time() * 1000)
    headers = (("a", b"1"), ("b", b"2"), ("c", None))
    batch = build_batch(((None, b"v", now, headers) for _ in range(65_536)), compression=ZSTD)
    partitions, worst, rss_mib = produce_while_probing(broker, [batch] * 4)
    assert worst < MAX_PING_S, f"another client waited {worst:.3f} s"  # was ~0.9 s
    assert rss_mib < 48, f"RSS grew {rss_mib:.0f} MiB"
    assert [p["error_code"] for p in partitions] == [0] * 4
    with connect(broker.port) as sock:
        ends = call(sock, ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": "t", "partitions": [
                        {"partition_index": i, "timestamp": -1} for i in range(4)]}]})
    assert [p["offset"] for p in ends["topics"][0]["partitions"]] == [65_536] * 4


def test_compression_bombs_are_refused(broker: BrokerProcess) -> None:
    """A header claiming 10 records over a million inside (inflated once, parsed for 10:
    CORRUPT_MESSAGE), and one record inflating past max_batch_decompressed_bytes (16 MiB:
    decompression stops there, MESSAGE_TOO_LARGE)."""
    few = bytearray(tiny_records(1_000_000))
    struct.pack_into(">i", few, 23, 9)  # last_offset_delta
    struct.pack_into(">i", few, 57, 10)  # record_count
    fix_crc(few)
    huge = build_batch([(None, bytes(32 * MiB), int(time.time() * 1000), [])],
                       compression=ZSTD)
    assert len(huge) < 4096
    partitions, worst, rss_mib = produce_while_probing(broker, [bytes(few), huge])
    assert [p["error_code"] for p in partitions] == [ErrorCode.CORRUPT_MESSAGE,
                                                     ErrorCode.MESSAGE_TOO_LARGE]
    assert "bytes after its last record" in partitions[0]["error_message"]
    assert "(max_batch_decompressed_bytes)" in partitions[1]["error_message"]
    assert worst < MAX_PING_S and rss_mib < 48


def test_a_produce_naming_too_many_partitions_is_closed_before_it_is_decoded(
        broker: BrokerProcess) -> None:
    """100,000 partition entries of one tiny batch each (7 MB): decoding them and the
    handler's pass held the loop ~0.8 s (2.7 s before the record-check work).  Over
    ``max_produce_partitions`` (10,000) the frame is judged before decoding and the
    connection closed, unanswered (Produce has no request-level error code)."""
    batch = build_batch([(None, b"v", int(time.time() * 1000), [])])
    frame = request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": 0, "records": batch}] * 100_000}]})
    with connect(broker.port, timeout_s=120) as sock, LoopProbe(broker.port) as probe:
        started = time.time()
        sock.sendall(frame)
        assert closed_by_peer(sock, timeout_s=30)
        ended = time.time()
        probe.stop()
    worst = probe.worst(started, ended)
    assert worst < MAX_PING_S, f"another client waited {worst:.3f} s"
    with connect(broker.port) as sock:  # the broker serves on, and appended nothing
        ends = call(sock, ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": "t", "partitions": [
                        {"partition_index": 0, "timestamp": -1}]}]})
    before = ends["topics"][0]["partitions"][0]["offset"]
    ok = request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": 0, "records": batch}] * 3}]})
    with connect(broker.port) as sock:
        sock.sendall(ok)
        body = decode_response(recv_frame(sock), ApiKey.PRODUCE, PRODUCE_V).body
    answers = body["responses"][0]["partition_responses"]
    assert [p["error_code"] for p in answers] == [0] * 3
    assert answers[0]["base_offset"] == before  # nothing of the closed request was appended
