"""Thousands of malformed frames from raw sockets: precise errors or closed connections.

The broker must stay up, other clients must keep working, and the partition log must
hold only the valid batches at the end.  The RNG is seeded; the seed is in the
assertion messages.
"""

from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import msgpack
import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.errors import ErrorCode
from clients.protocol.framing import read_frame
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess
from tests.broker.test_broker_integration import consume_all

pytestmark = pytest.mark.multiprocess

SEED = 20261122
MAX_REQUEST = 1024 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = {"max_request_bytes": MAX_REQUEST, "buffer_pool_bytes": 8 * MAX_REQUEST}
    with BrokerProcess(tmp_path_factory.mktemp("bad-input"), overrides=overrides) as b:
        with Admin(b.bootstrap) as admin:
            admin.create_topics([NewTopic("target", 1, 1, {})])
        yield b


def exchange(port: int, payload: bytes, half_close: bool = False) -> bytes | None:
    """Send ``payload``; return the response frame, or None if the broker closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(payload)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return None
        try:
            frame = read_frame(sock, max_frame_bytes=64 * 1024 * 1024)
        except ConnectionResetError:
            return None
        except Exception:  # a frame cut by the close counts as closed
            return None
        return None if frame is None else bytes(frame)


def frame(meta: object, tail: bytes = b"") -> bytes:
    packed = msgpack.packb(meta)
    return struct.pack(">iI", 4 + len(packed) + len(tail), len(packed)) + packed + tail


def produce_request(topic: str, records: bytes, correlation_id: int = 1) -> bytes:
    body = {"acks": 1, "timeout_ms": 5000,
            "topics": [{"name": topic, "partitions": [{"index": 0, "records": records}]}]}
    return encode_request_bytes(ApiKey.PRODUCE, 0, correlation_id, "bad", body)


def partition_error(response: bytes, api: ApiKey) -> int:
    body = decode_response(response, api, 0).body
    if api == ApiKey.PRODUCE:
        return body["responses"][0]["partition_responses"][0]["error_code"]
    if api == ApiKey.FETCH:
        return body["responses"][0]["partitions"][0]["error_code"]
    return body["topics"][0]["error_code"]


def test_malformed_frames_never_hurt_the_broker(broker: BrokerProcess) -> None:
    rng = random.Random(SEED)
    port = broker.port
    valid_values: list[bytes] = []
    outcomes: dict[str, int] = {}

    def expect_closed(kind: str, payload: bytes, half_close: bool = False) -> None:
        assert exchange(port, payload, half_close) is None, f"{kind} (seed {SEED})"
        outcomes[kind] = outcomes.get(kind, 0) + 1

    def expect_error(kind: str, payload: bytes, api: ApiKey, code: ErrorCode) -> None:
        response = exchange(port, payload)
        assert response is not None, f"{kind}: connection closed (seed {SEED})"
        assert partition_error(response, api) == code, f"{kind} (seed {SEED})"
        outcomes[kind] = outcomes.get(kind, 0) + 1

    for i in range(2000):
        case = i % 12
        if case == 0:  # random bytes with a plausible length
            body = rng.randbytes(rng.randrange(5, 2000))
            expect_closed("random bytes", struct.pack(">i", len(body)) + body)
        elif case == 1:  # lengths that can never be valid
            length = rng.choice([0, -1, -rng.randrange(2**31), MAX_REQUEST + 1, 2**31 - 1])
            expect_closed("bad length", struct.pack(">i", length))
        elif case == 2:  # a frame cut short, then the client stops writing
            whole = produce_request("target", build_batch([(None, b"x", 0, [])]))
            expect_closed("truncated", whole[: rng.randrange(1, len(whole) - 1)], True)
        elif case == 3:  # unknown API key
            expect_closed("unknown api", frame([rng.randrange(100, 30000), 0, i, "bad", {}]))
        elif case == 4:  # known API, unsupported version
            expect_closed("bad version", frame([int(ApiKey.PRODUCE), rng.randrange(1, 90), i,
                                                "bad", {}]))
        elif case == 5:  # schema violations in the body
            expect_closed("bad body", frame([int(ApiKey.PRODUCE), 0, i, "bad",
                                             {"acks": "all", "topics": 5}]))
        elif case == 6:  # invalid topic names
            name = rng.choice(["", "..", "sp ace", "a/b", "x" * 300, "ünï"])
            expect_error("invalid topic", produce_request(name, build_batch(
                [(None, b"v", 0, [])])), ApiKey.PRODUCE, ErrorCode.INVALID_TOPIC_EXCEPTION)
        elif case == 7:  # a flipped bit inside a batch's CRC-covered bytes
            batch = bytearray(build_batch([(b"k", b"value", 1, [])]))
            batch[rng.randrange(21, len(batch))] ^= 1 << rng.randrange(8)
            expect_error("bad crc", produce_request("target", bytes(batch)), ApiKey.PRODUCE,
                         ErrorCode.CORRUPT_MESSAGE)
        elif case == 8:  # records that are not a batch at all
            expect_error("garbage records", produce_request("target", rng.randbytes(
                rng.randrange(1, 300))), ApiKey.PRODUCE, ErrorCode.CORRUPT_MESSAGE)
        elif case == 9:  # unknown topic in a fetch
            body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1000,
                    "topics": [{"name": f"nope{i}", "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]}
            expect_error("unknown topic", encode_request_bytes(ApiKey.FETCH, 0, i, "bad", body),
                         ApiKey.FETCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        elif case == 10:  # ApiVersions at a version we do not have: answered at v0
            response = exchange(port, frame([int(ApiKey.API_VERSIONS), 9, i, "bad", {}]))
            assert response is not None
            body = decode_response(response, ApiKey.API_VERSIONS, 0).body
            assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
            outcomes["apiversions v9"] = outcomes.get("apiversions v9", 0) + 1
        else:  # interleave a valid produce: the broker keeps serving good clients
            value = f"valid-{i}".encode()
            response = exchange(port, produce_request("target", build_batch(
                [(None, value, 0, [])])))
            assert response is not None and partition_error(response, ApiKey.PRODUCE) == 0
            valid_values.append(value)

    assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
    assert len(outcomes) == 11
    # Other clients keep working...
    with Producer(broker.bootstrap, acks="all") as producer:
        producer.send("target", b"after the storm", partition=0).result(30)
    valid_values.append(b"after the storm")
    # ...and the log holds exactly the valid batches.
    records = consume_all(broker.bootstrap, "target", 1, len(valid_values))[0]
    assert [r.value for r in records] == valid_values
    log_dir = broker.data_dir / "target-0"
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".log"):
            data = (log_dir / name).read_bytes()
            assert sum(1 for _ in iter_batches(data, validate=True)) > 0


def test_oversize_frame_closes_only_that_connection(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as good:
        oversize = produce_request("target", b"\0" * (MAX_REQUEST + 10))
        assert exchange(broker.port, oversize) is None
        good.sendall(encode_request_bytes(ApiKey.API_VERSIONS, 0, 42, "good", {}))
        response = read_frame(good)
        assert response is not None
        assert decode_response(response, ApiKey.API_VERSIONS, 0).correlation_id == 42


def test_create_topic_with_invalid_name_or_config(broker: BrokerProcess) -> None:
    def create(name: str, configs: dict[str, str]) -> int:
        body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                            "configs": configs}], "timeout_ms": 1000}
        response = exchange(broker.port, encode_request_bytes(ApiKey.CREATE_TOPICS, 0, 1, "c",
                                                              body))
        assert response is not None
        return partition_error(response, ApiKey.CREATE_TOPICS)

    assert create("bad name", {}) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create("fine", {"segment_bytes": "tiny"}) == ErrorCode.INVALID_CONFIG
    assert create("fine", {"no_such_setting": "1"}) == ErrorCode.INVALID_CONFIG
    assert create("target", {}) == ErrorCode.TOPIC_ALREADY_EXISTS
