"""Thousands of malformed Kafka frames from raw sockets: precise errors or closed
connections.

A frame the codec cannot read (random bytes, bad lengths, unknown API keys, versions we
do not serve, bodies that break the schema) closes its connection, as Kafka does; a body
that decodes but makes no sense (invalid topic names, corrupt batches, negative counts,
unknown resources or operations) gets Kafka's error code in the answer.  The broker
must stay up, other clients must keep working, and the partition log must hold only the
valid batches at the end.  Requests go at the lowest or the highest version we serve,
chosen by the seeded RNG; the seed is in the assertion messages.
"""

from __future__ import annotations

import os
import random
import socket
import struct
from collections.abc import Iterator

import psutil
import pytest

from clients.admin import Admin
from clients.producer.producer import Producer
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response, encode_request_bytes
from clients.protocol.errors import ErrorCode
from clients.protocol.framing import read_frame
from clients.protocol.registry import APIS
from clients.records.batch import iter_batches
from clients.records.record import build_batch
from clients.types import NewTopic
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import wait_for
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


class Hang(AssertionError):
    """The broker neither answered nor closed within the deadline."""


def exchange(port: int, payload: bytes, half_close: bool = False,
             deadline_s: float = 15.0) -> bytes | None:
    """Send ``payload``; return the response frame, or None if the broker closed.

    Neither within ``deadline_s`` is a hang (:class:`Hang`), never counted as a close."""
    with socket.create_connection(("127.0.0.1", port), timeout=deadline_s) as sock:
        try:
            sock.sendall(payload)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            return None
        try:
            frame = read_frame(sock, max_frame_bytes=64 * 1024 * 1024)
        except TimeoutError:
            raise Hang(f"no answer and no close within {deadline_s} s") from None
        except ConnectionResetError:
            return None
        except Exception:  # a frame cut by the close counts as closed
            return None
        return None if frame is None else bytes(frame)


def broker_resources(broker: BrokerProcess) -> tuple[int, int]:
    """Open fds and resident bytes over the broker's processes (main + network)."""
    assert broker.proc is not None
    procs = [psutil.Process(broker.proc.pid), *(psutil.Process(p) for p in broker.network_pids())]
    return sum(p.num_fds() for p in procs), sum(p.memory_info().rss for p in procs)


def header(api_key: int, version: int, correlation_id: int) -> bytes:
    """A request header v1 (client id "bad"): all a broker reads before the body."""
    return struct.pack(">hhih", api_key, version, correlation_id, 3) + b"bad"


def frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    payload = header(api_key, version, correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


def produce_request(topic: str, records: bytes, correlation_id: int = 1,
                    version: int | None = None) -> bytes:
    body = {"acks": 1, "timeout_ms": 5000,
            "topics": [{"name": topic, "partitions": [{"index": 0, "records": records}]}]}
    version = APIS[ApiKey.PRODUCE].max_version if version is None else version
    return encode_request_bytes(ApiKey.PRODUCE, version, correlation_id, "bad", body)


def partition_error(response: bytes, api: ApiKey, version: int | None = None) -> int:
    version = APIS[api].max_version if version is None else version
    body = decode_response(response, api, version).body
    if api == ApiKey.PRODUCE:
        return body["responses"][0]["partition_responses"][0]["error_code"]
    if api == ApiKey.FETCH:
        return body["responses"][0]["partitions"][0]["error_code"]
    if api in (ApiKey.LIST_OFFSETS, ApiKey.DELETE_RECORDS):
        return body["topics"][0]["partitions"][0]["error_code"]
    if api == ApiKey.DESCRIBE_CONFIGS:
        return body["results"][0]["error_code"]
    if api == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        return body["responses"][0]["error_code"]
    if api == ApiKey.FIND_COORDINATOR and version >= 4:
        return body["coordinators"][0]["error_code"]
    if api == ApiKey.FIND_COORDINATOR:
        return body["error_code"]
    return body["topics"][0]["error_code"]


def served(rng: random.Random, api: ApiKey) -> int:
    """The lowest or the highest version serving these bodies, which name topics (a
    Fetch names them up to v12; by id from v13: test_fetch_by_topic_id.py)."""
    highest = 12 if api == ApiKey.FETCH else APIS[api].max_version
    return rng.choice([APIS[api].min_version, highest])


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

    def expect_answer(kind: str, api: ApiKey, version: int, body: dict, code: ErrorCode,
                      correlation_id: int) -> None:
        payload = encode_request_bytes(api, version, correlation_id, "bad", body)
        response = exchange(port, payload)
        assert response is not None, f"{kind} v{version}: connection closed (seed {SEED})"
        assert partition_error(response, api, version) == code, f"{kind} v{version} (seed " \
            f"{SEED})"
        outcomes[kind] = outcomes.get(kind, 0) + 1

    for warm in (b"warm-0", b"warm-1"):  # the produce path's lazy state is in place
        assert exchange(port, produce_request("target", build_batch([(None, warm, 0, [])])))
        valid_values.append(warm)
    fds_before, rss_before = broker_resources(broker)

    for i in range(2000):
        case = i % 16
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
            expect_closed("unknown api", frame(rng.randrange(100, 30000), 0, i))
        elif case == 4:  # known API, a version we do not serve
            version = rng.choice([0, 1, 2, rng.randrange(13, 90)])
            expect_closed("bad version", frame(int(ApiKey.PRODUCE), version, i))
        elif case == 5:  # a body that breaks the schema (random bytes after the header)
            expect_closed("bad body", frame(int(ApiKey.PRODUCE), served(rng, ApiKey.PRODUCE),
                                            i, rng.randbytes(rng.randrange(0, 40))))
        elif case == 6:  # invalid topic names
            name = rng.choice(["", "..", "sp ace", "a/b", "x" * 300, "ünï"])
            version = served(rng, ApiKey.PRODUCE)
            response = exchange(port, produce_request(name, build_batch([(None, b"v", 0, [])]),
                                                      i, version))
            assert response is not None, f"invalid topic: closed (seed {SEED})"
            assert partition_error(response, ApiKey.PRODUCE, version) == \
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"invalid topic (seed {SEED})"
            outcomes["invalid topic"] = outcomes.get("invalid topic", 0) + 1
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
            expect_answer("unknown topic", ApiKey.FETCH, served(rng, ApiKey.FETCH), body,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, i)
        elif case == 10:  # ApiVersions at a version we do not have: answered at v0
            response = exchange(port, frame(int(ApiKey.API_VERSIONS), 9, i))
            assert response is not None
            body = decode_response(response, ApiKey.API_VERSIONS, 0).body
            assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
            outcomes["apiversions v9"] = outcomes.get("apiversions v9", 0) + 1
        elif case == 11:  # negative sizes, offsets and timestamps that decode fine
            which = rng.randrange(3)
            if which == 0:
                body = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": -rng.randrange(1, 99),
                        "topics": [{"name": "target", "partitions": [
                            {"partition": 0, "fetch_offset": 0,
                             "partition_max_bytes": -rng.randrange(1, 99)}]}]}
                expect_answer("negative fetch size", ApiKey.FETCH, served(rng, ApiKey.FETCH),
                              body, ErrorCode.INVALID_FETCH_SIZE, i)
            elif which == 1:
                body = {"topics": [{"name": "target", "partitions": [
                    {"partition_index": 0, "timestamp": -rng.randrange(4, 1 << 40)}]}]}
                expect_answer("negative timestamp", ApiKey.LIST_OFFSETS,
                              served(rng, ApiKey.LIST_OFFSETS), body, ErrorCode.INVALID_REQUEST,
                              i)
            else:
                body = {"timeout_ms": 100, "topics": [{"name": "target", "partitions": [
                    {"partition_index": 0, "offset": -rng.randrange(2, 1 << 40)}]}]}
                expect_answer("negative delete offset", ApiKey.DELETE_RECORDS,
                              served(rng, ApiKey.DELETE_RECORDS), body,
                              ErrorCode.OFFSET_OUT_OF_RANGE, i)
        elif case == 12:  # unknown partitions, resources and operations
            which = rng.randrange(3)
            if which == 0:
                body = {"topics": [{"name": "target", "partitions": [
                    {"partition_index": rng.choice([-1, 5, 1 << 30]), "timestamp": -1}]}]}
                expect_answer("unknown partition", ApiKey.LIST_OFFSETS,
                              served(rng, ApiKey.LIST_OFFSETS), body,
                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, i)
            elif which == 1:
                body = {"resources": [{"resource_type": rng.choice([0, 1, 3, 8, 16, 99]),
                                       "resource_name": "target",
                                       "configuration_keys": None}]}
                expect_answer("unknown resource type", ApiKey.DESCRIBE_CONFIGS,
                              served(rng, ApiKey.DESCRIBE_CONFIGS), body,
                              ErrorCode.INVALID_REQUEST, i)
            else:
                body = {"resources": [{"resource_type": 2, "resource_name": "target",
                                       "configs": [{"name": "retention.ms", "value": "1",
                                                    "config_operation": rng.randrange(4, 100)}]}]}
                expect_answer("unknown config operation", ApiKey.INCREMENTAL_ALTER_CONFIGS,
                              served(rng, ApiKey.INCREMENTAL_ALTER_CONFIGS), body,
                              ErrorCode.INVALID_REQUEST, i)
        elif case == 13:  # a bad config name or value in CreateTopics
            name, value = rng.choice([("no.such.config", "1"), ("retention.ms", "soon"),
                                      ("segment.bytes", "-1"), ("cleanup.policy", "both")])
            body = {"topics": [{"name": f"fresh{i}", "num_partitions": 1,
                                "replication_factor": 1,
                                "configs": [{"name": name, "value": value}]}],
                    "timeout_ms": 1000}
            expect_answer("bad config", ApiKey.CREATE_TOPICS, served(rng, ApiKey.CREATE_TOPICS),
                          body, ErrorCode.INVALID_CONFIG, i)
        elif case == 14:  # a negative partition count
            body = {"topics": [{"name": f"fresh{i}", "num_partitions": -rng.randrange(2, 99),
                                "replication_factor": 1}], "timeout_ms": 1000}
            expect_answer("negative partitions", ApiKey.CREATE_TOPICS,
                          served(rng, ApiKey.CREATE_TOPICS), body, ErrorCode.INVALID_PARTITIONS,
                          i)
        else:  # interleave a valid produce: the broker keeps serving good clients
            value = f"valid-{i}".encode()
            response = exchange(port, produce_request("target", build_batch(
                [(None, value, 0, [])])))
            assert response is not None and partition_error(response, ApiKey.PRODUCE) == 0
            valid_values.append(value)

    assert broker.proc is not None and broker.proc.poll() is None, "the broker died"
    assert len(outcomes) >= 19, sorted(outcomes)
    # Every connection of the storm is reaped, and memory did not grow with it.
    assert wait_for(lambda: broker_resources(broker)[0] <= fds_before, 10), \
        f"fds {fds_before} -> {broker_resources(broker)[0]} (seed {SEED})"
    rss_growth = broker_resources(broker)[1] - rss_before
    assert rss_growth < 32 * 1024 * 1024, f"RSS grew {rss_growth} bytes (seed {SEED})"
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


@pytest.mark.parametrize("version", [APIS[ApiKey.CREATE_TOPICS].min_version,
                                     APIS[ApiKey.CREATE_TOPICS].max_version])
def test_create_topic_with_invalid_name_or_config(broker: BrokerProcess, version: int) -> None:
    def create(name: str, configs: dict[str, str | None]) -> int:
        body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                            "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "timeout_ms": 1000}
        response = exchange(broker.port, encode_request_bytes(ApiKey.CREATE_TOPICS, version, 1,
                                                              "c", body))
        assert response is not None
        return partition_error(response, ApiKey.CREATE_TOPICS, version)

    assert create("bad name", {}) == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create("fine", {"segment.bytes": "tiny"}) == ErrorCode.INVALID_CONFIG
    assert create("fine", {"no_such_setting": "1"}) == ErrorCode.INVALID_CONFIG
    assert create("fine", {"retention.ms": None}) == ErrorCode.INVALID_CONFIG
    assert create("target", {}) == ErrorCode.TOPIC_ALREADY_EXISTS
