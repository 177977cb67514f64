"""Frame length validation, the incremental FrameDecoder and the socket helpers."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_request, encode_request_bytes
from clients.protocol.errors import ProtocolError
from clients.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameTooLargeError,
    frame_length_of,
    read_frame,
    send_buffers,
)

BODY = {
    "acks": 1,
    "timeout_ms": 30_000,
    "topics": [{"name": "t", "partitions": [{"index": 0, "records": b"r" * 50}]}],
}


def frame(correlation_id: int = 1, records: bytes = b"r" * 50) -> bytes:
    body = {**BODY, "topics": [{"name": "t", "partitions": [{"index": 0, "records": records}]}]}
    return encode_request_bytes(ApiKey.PRODUCE, 3, correlation_id, "c", body)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 1, 3])
def test_frame_length_below_minimum_is_rejected(length: int) -> None:
    with pytest.raises(ProtocolError, match=f"frame length {length} is below the minimum"):
        frame_length_of(struct.pack(">i", length))


def test_frame_length_limit_is_inclusive() -> None:
    assert frame_length_of(struct.pack(">i", 1000), max_frame_bytes=1000) == 1000
    with pytest.raises(FrameTooLargeError, match="frame length 1001 exceeds max_frame_bytes 1000"):
        frame_length_of(struct.pack(">i", 1001), max_frame_bytes=1000)
    assert DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    with pytest.raises(FrameTooLargeError):
        frame_length_of(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1))


def test_frame_length_needs_exactly_four_bytes() -> None:
    with pytest.raises(ProtocolError, match="needs 4 bytes, got 3"):
        frame_length_of(b"\x00\x00\x10")


def test_decoder_splits_frames_fed_byte_by_byte() -> None:
    data = frame(1) + frame(2) + frame(3)
    dec = FrameDecoder()
    got = []
    for i in range(len(data)):
        got += dec.feed(data[i : i + 1])
    assert [decode_request(f).correlation_id for f in got] == [1, 2, 3]
    assert dec.buffered_bytes == 0


def test_decoder_keeps_partial_frame_across_chunks() -> None:
    data = frame(1) + frame(2)
    dec = FrameDecoder()
    assert dec.feed(data[:7]) == []
    assert dec.buffered_bytes == 7
    first = dec.feed(data[7:60])
    rest = dec.feed(bytearray(data[60:]))
    assert [decode_request(f).correlation_id for f in first + rest] == [1, 2]


def test_decoder_aliases_whole_frames_in_bytes_chunks() -> None:
    data = frame(1, records=b"abc") + frame(2, records=b"xyz")
    frames = FrameDecoder().feed(data)
    assert [f.obj for f in frames] == [data, data]
    records = decode_request(frames[1]).body["topics"][0]["partitions"][0]["records"]
    assert records.obj is data and bytes(records) == b"xyz"


def test_decoder_copies_mutable_chunks_into_own_frame() -> None:
    chunk = bytearray(frame(1, records=b"abc"))
    [f] = FrameDecoder().feed(chunk)
    chunk[:] = b"\x00" * len(chunk)  # the caller reuses its receive buffer
    req = decode_request(f)
    assert bytes(req.body["topics"][0]["partitions"][0]["records"]) == b"abc"
    assert f.obj is not chunk


def test_decoder_rejects_oversize_length_before_buffering_body() -> None:
    dec = FrameDecoder(max_frame_bytes=64)
    with pytest.raises(FrameTooLargeError, match="frame length 65 exceeds max_frame_bytes 64"):
        dec.feed(struct.pack(">i", 65) + b"x" * 10)
    assert dec.buffered_bytes == 0
    with pytest.raises(ProtocolError, match="already failed: frame length 65"):
        dec.feed(frame())


def test_decoder_rejects_length_split_across_chunks() -> None:
    dec = FrameDecoder()
    assert dec.feed(b"\xff\xff") == []
    with pytest.raises(ProtocolError, match="below the minimum"):
        dec.feed(b"\xff\xfe")


def test_decoder_bound_must_be_sane() -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes=3)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes=2**31)


def test_send_buffers_and_read_frame_over_socket(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    records = bytes(range(256)) * 40
    body = {**BODY, "topics": [{"name": "t", "partitions": [{"index": 3, "records": records}]}]}
    buffers = encode_request(ApiKey.PRODUCE, 3, 42, None, body)
    assert buffers[1] is records  # passed through, not joined
    sent = send_buffers(a, buffers)
    assert sent == sum(len(x) for x in buffers)
    got = read_frame(b)
    assert got is not None
    req = decode_request(got)
    assert req.correlation_id == 42 and req.client_id is None
    part = req.body["topics"][0]["partitions"][0]
    assert part["index"] == 3 and bytes(part["records"]) == records
    assert part["records"].obj is got.obj
    a.close()
    assert read_frame(b) is None  # clean EOF between frames


def test_send_buffers_resumes_partial_sends(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    payload = [b"x" * 100_000, bytearray(b"y" * 3), memoryview(b"z" * 70_000)]
    received = bytearray()

    def drain() -> None:
        while len(received) < 170_003:
            chunk = b.recv(65536)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        assert send_buffers(a, payload) == 170_003
    finally:
        reader.join(timeout=30)
    assert bytes(received) == b"x" * 100_000 + b"yyy" + b"z" * 70_000


def test_read_frame_eof_inside_frame(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    data = frame()
    a.sendall(data[:-5])
    a.close()
    with pytest.raises(ProtocolError, match=f"closed inside a frame \\({len(data) - 9} of"):
        read_frame(b)


def test_read_frame_eof_inside_length(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(b"\x00\x00")
    a.close()
    with pytest.raises(ProtocolError, match="inside a frame length \\(2 of 4 bytes\\)"):
        read_frame(b)


def test_read_frame_checks_bound_before_reading(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.sendall(struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameTooLargeError):
        read_frame(b, max_frame_bytes=1024)
