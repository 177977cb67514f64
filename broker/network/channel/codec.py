"""Descriptor channel codec: the messages between the main process and a network process.

A packet (at most :data:`MAX_MESSAGE_BYTES` bytes) holds one message - a msgpack array
as below - or a batch: a msgpack array of up to :data:`MAX_BATCH_MESSAGES` messages,
processed in order (messages posted in one event-loop iteration share one syscall). The
payloads (request frames, responses) live in buffers of the broker's shared-memory
:class:`~clients.memory.buffer_pool.BufferPool`, a ``handle`` is ``[slot, size, generation]``:

| direction  | message                                          | meaning                          |
|------------|--------------------------------------------------|----------------------------------|
| net → main | ``[0, "ready", port, pid]``                      | READY: listening on ``port``     |
| net → main | ``[1, conn_id, handle, frame_len]``              | REQUEST: frame bytes (no length  |
|            |                                                  | field) in ``handle[:frame_len]`` |
| net → main | ``[2, conn_id]``                                 | CLOSED: a connection that sent a |
|            |                                                  | request is gone                  |
| main → net | ``[3, conn_id, handle, prefix_len, regions_len,``| RESPONSE: write ``prefix_len``   |
|            | `` *timing]``                                    | bytes, then sendfile the msgpack |
|            |                                                  | ``[[path, position, length],..]``|
|            |                                                  | stored after them; free; unmute  |
| main → net | ``[4, conn_id, *timing]``                        | NO_RESPONSE (acks=0): unmute     |
| main → net | ``[5, conn_id]``                                 | CLOSE: close the connection      |
| net → main | ``[6, conn_id, ip]``                             | PEER: the connection's peer      |
|            |                                                  | address, sent once, before its   |
|            |                                                  | first REQUEST (failed logins are |
|            |                                                  | counted per address)             |
| main → net | ``[7]``                                          | LISTEN: the listeners listen now |
|            |                                                  | (the broker caught up with its   |
|            |                                                  | metadata): accept on them        |

``timing`` (optional: absent, the answer is not counted in the request metrics) is
``slots, dequeued_at, local_at, responded_at``: the request's metric slots (an int,
:func:`broker.metrics.request_times.pack_slots`) and the main process's three instants
of it (``time.monotonic()`` floats); the network process records the request's times
when the answer is out (:mod:`broker.metrics.request_times`).

Connection ids say which listener accepted the connection: ids from
:data:`INTERNAL_CONN_ID_BASE` up are the broker's internal listener (replication traffic
from other brokers, ``internal_port``), ids below it the client listener
(:func:`is_internal_connection`).

:func:`decode_message` / :func:`decode_packet` check the type, arity and field types of
every message and raise :class:`ChannelProtocolError` for anything else.

Costs: encode/decode of one message is one msgpack call (~1 us), O(fields).
Thread-safety: pure functions and immutable constants; any thread may use them.
"""

from __future__ import annotations

from typing import Any

import msgpack

from clients.protocol.errors import MiniKafkaError, ProtocolError

READY, REQUEST, CLOSED, RESPONSE, NO_RESPONSE, CLOSE, PEER, LISTEN = range(8)
MAX_BATCH_MESSAGES = 256
MAX_MESSAGE_BYTES = 64 * 1024  # one packet: a batch of MAX_BATCH_MESSAGES fits easily
SOCKET_BUFFER_BYTES = 1 << 20  # asked for; the kernel caps it at net.core.[rw]mem_max
_ARITY = ((4,), (4,), (2,), (5, 9), (2, 6), (2,), (3,), (1,))  # message lengths by type
MAX_PEER_CHARS = 64  # an IPv6 address with a zone id fits
# requests of one client connection the main process may hold at once (the broker's
# network processes read that far ahead; answers go back in request order): the
# producer's default max_in_flight_requests_per_connection
MAX_PIPELINED_REQUESTS = 5
INTERNAL_CONN_ID_BASE = 1 << 48  # conn ids of the internal listener start here
_NAMES = ("READY", "REQUEST", "CLOSED", "RESPONSE", "NO_RESPONSE", "CLOSE", "PEER",
          "LISTEN")

Handle = tuple[int, int, int]  # (slot, size, generation), e.g. a BufferHandle
Message = tuple[Any, ...]

_packb = msgpack.packb
_unpackb = msgpack.unpackb


class ChannelProtocolError(ProtocolError):
    """A channel message that is not one of the declared messages."""


class ChannelFullError(MiniKafkaError):
    """More messages waiting for the peer than ``max_queued_messages``."""


# ----------------------------------------------------------------------- codec


def is_internal_connection(conn_id: int) -> bool:
    """Whether ``conn_id`` was accepted on the internal listener (see the docstring)."""
    return conn_id >= INTERNAL_CONN_ID_BASE


def encode_ready(port: int, pid: int) -> bytes:
    return _packb((READY, "ready", port, pid))  # type: ignore[no-any-return]


def encode_request(conn_id: int, handle: Handle, frame_len: int) -> bytes:
    return _packb((REQUEST, conn_id, handle, frame_len))  # type: ignore[no-any-return]


def encode_closed(conn_id: int) -> bytes:
    return _packb((CLOSED, conn_id))  # type: ignore[no-any-return]


Timing = tuple[int, float, float, float]  # slots, dequeued_at, local_at, responded_at


def encode_response(conn_id: int, handle: Handle, prefix_len: int, regions_len: int,
                    timing: Timing | tuple[()] = ()) -> bytes:
    return _packb((RESPONSE, conn_id, handle, prefix_len, regions_len, *timing))  # type: ignore[no-any-return]


def encode_peer(conn_id: int, ip: str) -> bytes:
    return _packb((PEER, conn_id, ip))  # type: ignore[no-any-return]


def encode_no_response(conn_id: int, timing: Timing | tuple[()] = ()) -> bytes:
    return _packb((NO_RESPONSE, conn_id, *timing))  # type: ignore[no-any-return]


def encode_close(conn_id: int) -> bytes:
    return _packb((CLOSE, conn_id))  # type: ignore[no-any-return]


def encode_listen() -> bytes:
    return _packb((LISTEN,))  # type: ignore[no-any-return]


def _is_int(value: object) -> bool:
    return type(value) is int


def _is_timing(msg: tuple[Any, ...], at: int) -> bool:
    return _is_int(msg[at]) and all(type(v) is float for v in msg[at + 1:])


def _is_handle(value: object) -> bool:
    return (
        type(value) is tuple
        and len(value) == 3
        and all(type(v) is int for v in value)
        and value[0] >= 0
        and value[1] > 0
    )


def decode_message(data: bytes | memoryview) -> Message:
    """Decode and validate one message; returns a tuple shaped as in the table above
    (a handle is a ``(slot, size, generation)`` tuple)."""
    return _validate(_unpack(data))


def decode_packet(data: bytes | memoryview) -> list[Message]:
    """Decode one channel packet: a single message, or an array of messages (a batch)."""
    obj = _unpack(data)
    if type(obj) is tuple and obj and type(obj[0]) is tuple:
        if len(obj) > MAX_BATCH_MESSAGES:
            raise ChannelProtocolError(f"batch of {len(obj)} messages > {MAX_BATCH_MESSAGES}")
        return [_validate(msg) for msg in obj]
    return [_validate(obj)]


def encode_packet(messages: list[Message]) -> bytes:
    """One packet for 1..MAX_BATCH_MESSAGES message tuples."""
    return _packb(messages[0] if len(messages) == 1 else messages)  # type: ignore[no-any-return]


def _unpack(data: bytes | memoryview) -> Any:
    try:
        return _unpackb(data, use_list=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ChannelProtocolError(f"channel message is not msgpack: {exc}") from None


def _validate(msg: Any) -> Message:
    if type(msg) is not tuple or not msg or type(msg[0]) is not int:
        raise ChannelProtocolError(f"channel message must be an array [type, ...], got {msg!r}")
    kind = msg[0]
    if not 0 <= kind < len(_ARITY):
        raise ChannelProtocolError(f"unknown channel message type {kind}")
    if len(msg) not in _ARITY[kind]:
        raise ChannelProtocolError(
            f"{_NAMES[kind]} message needs {' or '.join(map(str, _ARITY[kind]))} fields, "
            f"got {len(msg)}: {msg!r}"
        )
    if kind == REQUEST:
        ok = _is_int(msg[1]) and _is_handle(msg[2]) and _is_int(msg[3]) and msg[3] > 0
    elif kind == RESPONSE:
        ok = (
            _is_int(msg[1])
            and _is_handle(msg[2])
            and _is_int(msg[3])
            and _is_int(msg[4])
            and msg[3] >= 0
            and msg[4] >= 0
            and msg[3] + msg[4] <= msg[2][1]
            and (len(msg) == 5 or _is_timing(msg, 5))
        )
    elif kind == NO_RESPONSE:
        ok = _is_int(msg[1]) and (len(msg) == 2 or _is_timing(msg, 2))
    elif kind == PEER:
        ok = _is_int(msg[1]) and type(msg[2]) is str and len(msg[2]) <= MAX_PEER_CHARS
    elif kind == READY:
        ok = msg[1] == "ready" and _is_int(msg[2]) and 0 < msg[2] < 65536 and _is_int(msg[3])
    elif kind == LISTEN:
        ok = True
    else:
        ok = _is_int(msg[1])
    if not ok:
        raise ChannelProtocolError(f"malformed {_NAMES[kind]} message: {msg!r}")
    return msg
