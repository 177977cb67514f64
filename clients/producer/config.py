"""Producer input checks: settings (``Producer(...)``) and per-record arguments.

Every check raises a precise error before anything is queued or started: settings an
:class:`~clients.protocol.errors.InvalidConfigError` naming the setting, its bound and the value
given; record arguments a ``TypeError`` (wrong type) or ``ValueError`` (partition out of
range).  ``acks`` accepts 0, 1, -1 or ``"all"`` (also as strings) and is normalised to
0 / 1 / -1.

Idempotence follows Kafka 3 (:func:`resolve_idempotence`): when ``enable_idempotence``
is left unset it is on unless a setting conflicts with it (``acks`` 0/1,
``retries=0``, more than 5 in flight), in which case it is off (at-least-once); set to
True explicitly, such a conflict is an error listing every conflict.

Transactions (:func:`check_transactional`): ``transactional_id`` (None: not
transactional) must be a non-empty str; ``transaction_timeout_ms`` (Kafka's default
60000) an int > 0 (the coordinator refuses one above its maximum with
INVALID_TRANSACTION_TIMEOUT at ``init_transactions``).  A transactional producer is
idempotent: ``enable_idempotence`` unset means True (so a conflicting ``acks`` is an
error), ``enable_idempotence=False`` is an error, as in Kafka.

Costs: O(1) per setting; ``check_headers`` O(headers).  Pure functions, thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clients.producer.batch import RECORD_OVERHEAD_BOUND
from clients.producer.idempotence import MAX_IN_FLIGHT_PER_PARTITION
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.records.batch import HEADER_SIZE
from clients.types import Header

ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}


class SerializationError(MiniKafkaError):
    """A ``key_serializer`` / ``value_serializer`` raised (``__cause__`` is its error);
    nothing was queued."""

    code = ErrorCode.INVALID_RECORD


def check_positive(name: str, value: Any, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_config(
    *,
    acks: int | str | None,
    linger_ms: int,
    batch_size: int,
    buffer_memory: int,
    max_block_ms: int,
    retries: int,
    retry_backoff_ms: int,
    delivery_timeout_ms: int,
    request_timeout_ms: int,
    max_in_flight_requests_per_connection: int,
    max_request_size: int,
    debug_drop_response_ratio: float,
) -> int:
    """Validate the producer's settings (in this order); return ``acks`` as 0, 1 or -1."""
    if acks is not None and acks not in ACKS:
        raise InvalidConfigError(f"acks must be 0, 1, -1 or 'all', got {acks!r}")
    check_positive("linger_ms", linger_ms, 0)
    check_positive("batch_size", batch_size, HEADER_SIZE + RECORD_OVERHEAD_BOUND)
    check_positive("buffer_memory", buffer_memory, batch_size)
    check_positive("max_block_ms", max_block_ms, 0)
    check_positive("retries", retries, 0)
    check_positive("retry_backoff_ms", retry_backoff_ms, 0)
    check_positive("request_timeout_ms", request_timeout_ms)
    check_positive("max_in_flight_requests_per_connection", max_in_flight_requests_per_connection)
    check_positive("max_request_size", max_request_size, HEADER_SIZE + RECORD_OVERHEAD_BOUND)
    if delivery_timeout_ms < linger_ms + request_timeout_ms:
        raise InvalidConfigError(
            f"delivery_timeout_ms ({delivery_timeout_ms}) must be >= linger_ms + "
            f"request_timeout_ms ({linger_ms + request_timeout_ms})"
        )
    if not (isinstance(debug_drop_response_ratio, int | float)
            and 0.0 <= debug_drop_response_ratio < 1.0):  # fmt: skip
        raise InvalidConfigError(
            f"debug_drop_response_ratio must be in [0, 1), got {debug_drop_response_ratio!r}"
        )
    return -1 if acks is None else ACKS[acks]


BATCH_GROWTH_FACTOR = 16  # default batch_max_size / batch_size (16 KiB -> 256 KiB, KIP-782's)


def resolve_batch_max_size(requested: int | None, batch_size: int, max_request_size: int,
                           buffer_memory: int) -> int:  # fmt: skip
    """How far a backlogged partition's batch may grow (KIP-782's ``batch.max.size``).

    None: 16 x ``batch_size`` (256 KiB at the default 16 KiB, KIP-782's proposed
    default; a small ``batch_size`` chosen on purpose stays proportionally small).  An
    explicit value must be an int >= ``batch_size``; 0 or ``batch_size`` turns growth
    off.  The result never exceeds ``max_request_size`` or a quarter of ``buffer_memory``
    (so one grown batch never takes the whole pool from the other partitions), nor falls
    below ``batch_size``.
    """
    if requested is None:
        requested = BATCH_GROWTH_FACTOR * batch_size
    elif requested == 0:
        requested = batch_size
    else:
        check_positive("batch_max_size", requested, batch_size)
    return max(batch_size, min(requested, max_request_size, buffer_memory // 4))


def resolve_idempotence(
    requested: bool | None, acks: int, retries: int, max_in_flight: int
) -> bool:
    """Kafka 3's rule: explicit True must fit; unset means on unless something conflicts."""
    if requested is not None and not isinstance(requested, bool):
        raise InvalidConfigError(f"enable_idempotence must be a bool, got {requested!r}")
    conflicts = []
    if acks != -1:
        conflicts.append(f"acks must be 'all' (-1), got {acks}")
    if retries < 1:
        conflicts.append(f"retries must be > 0, got {retries}")
    if max_in_flight > MAX_IN_FLIGHT_PER_PARTITION:
        conflicts.append(
            f"max_in_flight_requests_per_connection must be <= {MAX_IN_FLIGHT_PER_PARTITION}, "
            f"got {max_in_flight}"
        )
    if requested and conflicts:
        raise InvalidConfigError(
            "enable_idempotence=True: "
            + "; ".join(conflicts)
            + " (or set enable_idempotence=False)"
        )
    return requested is not False and not conflicts


DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms


def check_transactional(transactional_id: str | None, transaction_timeout_ms: int,
                        enable_idempotence: bool | None) -> bool | None:  # fmt: skip
    """Validate the transaction settings; return ``enable_idempotence`` as requested
    (True when transactional and left unset)."""
    check_positive("transaction_timeout_ms", transaction_timeout_ms)
    if transactional_id is None:
        return enable_idempotence
    if not isinstance(transactional_id, str) or not transactional_id:
        raise InvalidConfigError(
            f"transactional_id must be a non-empty str or None, got {transactional_id!r}")
    if enable_idempotence is False:
        raise InvalidConfigError(
            "cannot set a transactional_id without also enabling idempotence "
            "(enable_idempotence=False was given)")  # fmt: skip
    return True


def as_bytes(name: str, v: Any) -> bytes | None:
    if v is None or type(v) is bytes:
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"{name} must be bytes or None, got {type(v).__name__} (or set "
                    f"{name}_serializer)")


def check_headers(headers: Sequence[Header] | None) -> Sequence[Header]:
    if not headers:
        return ()
    out = []
    for item in headers:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {item!r:.60}")
        out.append((item[0], as_bytes(f"header {item[0]!r} value", item[1])))
    return out


def check_partition(topic: str, partition: int, num_partitions: int) -> None:
    if not isinstance(partition, int) or not 0 <= partition < num_partitions:
        raise ValueError(
            f"partition {partition!r} is not in 0..{num_partitions - 1} for topic {topic!r}"
        )
