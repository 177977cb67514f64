"""Descriptor channel between the broker's main process and one network process.

Transport: one ``AF_UNIX``/``SOCK_SEQPACKET`` socketpair per network process (packet
boundaries kept by the kernel, in order, reliable; EOF when the peer process dies).
A packet (at most :data:`MAX_MESSAGE_BYTES` bytes) holds one message - a msgpack array
as below - or a batch: a msgpack array of up to :data:`MAX_BATCH_MESSAGES` messages,
processed in order (messages posted in one event-loop iteration share one syscall). The
payloads (request frames, responses) live in buffers of the broker's shared-memory
:class:`~clients.buffer_pool.BufferPool`, a ``handle`` is ``[slot, size, generation]``
(the message table is in :mod:`broker.request_channel_codec`).

This module is the stable import point; the code lives in three modules of one concept each:

- :mod:`broker.request_channel_codec` - message types, the byte-level codec and its errors;
- :mod:`broker.request_channel_endpoint` - :class:`ChannelEndpoint`, one side of the
  socketpair with a bounded send queue (used as is by the network process);
- :mod:`broker.request_channel_main` - :class:`MainChannelEndpoint`, the main process's
  side, which also tracks request/response buffer ownership per connection.

Costs: encode/decode of one message is one msgpack call (~1 us); one ``send``/``recv``
syscall per packet. Thread-safety: an endpoint belongs to one thread (its event loop).
"""

from __future__ import annotations

from broker.request_channel_codec import (
    CLOSE,
    CLOSED,
    MAX_BATCH_MESSAGES,
    MAX_MESSAGE_BYTES,
    NO_RESPONSE,
    READY,
    REQUEST,
    RESPONSE,
    SOCKET_BUFFER_BYTES,
    ChannelFullError,
    ChannelProtocolError,
    Handle,
    Message,
    decode_message,
    decode_packet,
    encode_close,
    encode_closed,
    encode_no_response,
    encode_packet,
    encode_ready,
    encode_request,
    encode_response,
)
from broker.request_channel_endpoint import ChannelEndpoint
from broker.request_channel_main import MainChannelEndpoint

__all__ = [
    "CLOSE",
    "CLOSED",
    "MAX_BATCH_MESSAGES",
    "MAX_MESSAGE_BYTES",
    "NO_RESPONSE",
    "READY",
    "REQUEST",
    "RESPONSE",
    "SOCKET_BUFFER_BYTES",
    "ChannelEndpoint",
    "ChannelFullError",
    "ChannelProtocolError",
    "Handle",
    "MainChannelEndpoint",
    "Message",
    "decode_message",
    "decode_packet",
    "encode_close",
    "encode_closed",
    "encode_no_response",
    "encode_packet",
    "encode_ready",
    "encode_request",
    "encode_response",
]
