"""A client pipelining requests on one connection to a real broker (issue 36): answers in
request order, appends in request order even when the first Produce's records are checked
off the loop, no answer for acks=0, any API mixed in."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_response
from clients.records.bulk_encode import encode_batch_bulk
from tests.broker.processes import BrokerProcess
from tests.broker.raw_kafka import (
    API_VERSIONS_V,
    METADATA_V,
    connect,
    correlation_of,
    recv_frame,
    request,
)

pytestmark = pytest.mark.multiprocess
PRODUCE_V = 9


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("pipelined")
    (data_dir / "topics.json").write_text(json.dumps({"version": 1, "topics": {
        "t": {"num_partitions": 1, "replication_factor": 1, "configs": {}}}}))
    with BrokerProcess(data_dir) as process:
        yield process


def produce(cid: int, records: int, size: int, acks: int) -> bytes:
    batch = encode_batch_bulk([b"%08d" % i + bytes(size - 8) for i in range(records)],
                              timestamps=int(time.time() * 1000))
    return request(ApiKey.PRODUCE, PRODUCE_V, {
        "transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topics": [
            {"name": "t", "partitions": [{"index": 0, "records": batch}]}]}, cid)


def test_pipelined_requests_are_answered_and_appended_in_order(broker: BrokerProcess) -> None:
    # the first batch (~800 KiB) is over record_check_inline_bytes: checked off the loop
    sizes = {101: 800, 102: 3, 104: 5, 106: 7}
    frames = [produce(101, 800, 1000, 1), produce(102, 3, 100, 1),
              request(ApiKey.METADATA, METADATA_V, {"topics": None}, 103),
              produce(104, 5, 100, 0),  # acks=0: no answer
              request(ApiKey.API_VERSIONS, API_VERSIONS_V, {}, 105),
              produce(106, 7, 100, -1)]
    with connect(broker.port) as sock:
        for _ in range(3):  # three pipelines of six, one connection
            sock.sendall(b"".join(frames))
            answers = [recv_frame(sock) for _ in range(5)]
            assert [correlation_of(a) for a in answers] == [101, 102, 103, 105, 106]
            offsets = {}
            for a in answers:
                cid = correlation_of(a)
                if cid in sizes:
                    body = decode_response(a, ApiKey.PRODUCE, PRODUCE_V).body
                    part = body["responses"][0]["partition_responses"][0]
                    assert part["error_code"] == 0, part
                    offsets[cid] = part["base_offset"]
            # appended in request order, the acks=0 batch between 102 and 106
            assert offsets[102] == offsets[101] + sizes[101]
            assert offsets[106] == offsets[102] + sizes[102] + sizes[104]
