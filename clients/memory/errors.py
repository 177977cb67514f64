"""Exceptions raised by the shared-memory :class:`~clients.memory.buffer_pool.BufferPool`.

Each carries a protocol error code from :mod:`clients.protocol.errors` so it can cross a
process boundary as ``(code, message)`` like every other minikafka error:

| exception                   | code                | when                                        |
|-----------------------------|---------------------|---------------------------------------------|
| BufferPoolTimeoutError      | REQUEST_TIMED_OUT   | ``allocate`` waited ``max_block_ms``        |
| BufferPoolWaitersFullError  | REQUEST_TIMED_OUT   | the bounded waiter queue is full            |
| BufferTooLargeError         | MESSAGE_TOO_LARGE   | request above ``total_bytes``               |
| StaleBufferHandleError      | INVALID_REQUEST     | unknown, freed (double free) or reused slot |
| BufferPoolCorruptedError    | UNKNOWN_SERVER_ERROR| accounting check failed / bad segment magic |
| BufferPoolClosedError       | UNKNOWN_SERVER_ERROR| use after ``close()``                       |

Configuration errors use :class:`clients.protocol.errors.InvalidConfigError` (INVALID_CONFIG).
"""

from __future__ import annotations

from clients.protocol.errors import (
    ErrorCode,
    MessageTooLargeError,
    MiniKafkaError,
    RequestTimedOutError,
)


class BufferPoolError(MiniKafkaError):
    """Base class of every buffer pool failure."""


class BufferPoolTimeoutError(RequestTimedOutError, BufferPoolError):
    """Memory did not become available within ``max_block_ms`` (Kafka's TimeoutException)."""


class BufferPoolWaitersFullError(RequestTimedOutError, BufferPoolError):
    """The waiter queue (bounded by ``max_waiters``) has no room for another waiter."""


class BufferTooLargeError(MessageTooLargeError, BufferPoolError):
    """A request larger than the whole pool: it could never be satisfied, so fail at once."""


class StaleBufferHandleError(BufferPoolError):
    """A handle that does not name a live buffer (double free, use after free, garbage)."""

    code = ErrorCode.INVALID_REQUEST


class BufferPoolCorruptedError(BufferPoolError):
    """The shared accounting is inconsistent, or the segment is not a buffer pool."""


class BufferPoolClosedError(BufferPoolError):
    """The pool object was closed in this process."""
