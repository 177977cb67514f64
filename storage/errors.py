"""Storage-specific exceptions (all :class:`~clients.protocol.errors.MiniKafkaError` subclasses).

Each carries a protocol error code so the broker can answer a request with it directly:

==========================  ======================  ==========================================
exception                   code                    raised when
==========================  ======================  ==========================================
OffsetOutOfRangeError       OFFSET_OUT_OF_RANGE     a read/position request falls outside
                                                    [log_start_offset, log_end_offset]
StorageError                KAFKA_STORAGE_ERROR     an I/O failure (disk full, file vanished,
                                                    log closed); retriable for a reader of a
                                                    file region invalidated by truncation
LogInvariantError           UNKNOWN_SERVER_ERROR    ``Log.check_invariants`` found a broken
                                                    invariant (a bug or undetected corruption)
==========================  ======================  ==========================================

Pure data; thread- and process-safe.
"""

from __future__ import annotations

from clients.protocol.errors import ErrorCode, MiniKafkaError


class StorageError(MiniKafkaError):
    """An I/O problem with a log directory, segment or index (KAFKA_STORAGE_ERROR)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class LogInvariantError(MiniKafkaError):
    """A structural invariant of a log does not hold (raised by ``check_invariants``)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; the owner rebuilds it from the log."""
