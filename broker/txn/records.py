"""Record formats of the transaction-state topic (``__transaction_state``): key and value.

One record per transactional id: the key names the id, the value holds its latest
metadata (:class:`broker.txn.state.TxnMetadata`); the topic is compacted, so the latest
record per id survives.  A null value is a tombstone (the id expired:
``transactional_id_expiration_ms``).  Like the offsets topic (:mod:`broker.group.metadata`,
whose docstring and :mod:`broker.metadata.msgpack_form` say why the bytes are msgpack):
a big-endian int16 version, then a msgpack array of the fields in declared order; each
key and value declared once as a :class:`clients.protocol.schema.Struct`, the frozen
dataclasses repeat the fields for mypy (a test checks they match).

Key (version 0):

| bytes | field    | type          | meaning                          |
|-------|----------|---------------|----------------------------------|
| 0-1   | version  | int16         | 0                                |
| 2-    | body     | msgpack array | [transactional_id string]        |

Value (version 0; Kafka's TransactionLogValue fields, plus the epoch before the last bump):

| bytes | field    | type          | meaning                                              |
|-------|----------|---------------|------------------------------------------------------|
| 0-1   | version  | int16         | 0 (any version >= 0 is read with the fields it has)  |
| 2-    | body     | msgpack array | [producer_id int64, previous_producer_id int64,      |
|       |          |               |  next_producer_id int64, producer_epoch int64,       |
|       |          |               |  last_producer_epoch int64,                          |
|       |          |               |  transaction_timeout_ms int64, state int64 (Kafka's  |
|       |          |               |  state id, :class:`TransactionState`), partitions     |
|       |          |               |  array of [topic string, partitions array int32],    |
|       |          |               |  txn_start_timestamp_ms int64,                       |
|       |          |               |  txn_last_update_timestamp_ms int64,                 |
|       |          |               |  client_transaction_version int64]                   |

PrepareEpochFence is never stored (it is a step on the way to PrepareAbort); Dead is
stored as a tombstone.  Anything a decoder cannot accept raises :class:`TxnRecordError`
(the load skips such records and logs them).

Costs: encode/decode O(size of the record).  Pure functions on immutable values: safe
from any thread or process.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import msgpack

from broker.metadata.msgpack_form import array_encoder, build_from_msgpack, builder
from broker.txn.state import STATE_BY_ID, TransactionState, TxnMetadata
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.schema import INT32, INT64, STRING, Array, Field, Struct
from clients.protocol.topics import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 0
_VERSION = struct.Struct(">h")


class TxnRecordError(MiniKafkaError):
    """A record of the transaction-state topic cannot be decoded."""

    code = ErrorCode.CORRUPT_MESSAGE


TXN_KEY = Struct(Field("transactional_id", STRING), label="transaction key")


@dataclass(frozen=True, slots=True)
class TxnKey:
    transactional_id: str


TXN_PARTITIONS = Struct(
    Field("topic", STRING),
    Field("partitions", Array(INT32)),
    label="transaction partitions",
)


@dataclass(frozen=True, slots=True)
class TxnPartitions:
    topic: str
    partitions: tuple[int, ...]


TXN_VALUE = Struct(
    Field("producer_id", INT64),
    Field("previous_producer_id", INT64),
    Field("next_producer_id", INT64),
    Field("producer_epoch", INT64),
    Field("last_producer_epoch", INT64),
    Field("transaction_timeout_ms", INT64),
    Field("state", INT64),
    Field("partitions", Array(TXN_PARTITIONS)),
    Field("txn_start_timestamp_ms", INT64),
    Field("txn_last_update_timestamp_ms", INT64),
    Field("client_transaction_version", INT64),
    label="transaction value",
)


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    transaction_timeout_ms: int
    state: int
    partitions: tuple[TxnPartitions, ...]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    client_transaction_version: int


_CLASSES = {TXN_PARTITIONS: TxnPartitions}
_KEY_ARRAY = array_encoder(TXN_KEY, 0)
_VALUE_ARRAY = array_encoder(TXN_VALUE, VALUE_VERSION)
_KEY_BUILD = builder(TxnKey, TXN_KEY, 0, by_name=False, error=TxnRecordError)
_VALUE_BUILD = builder(TxnValue, TXN_VALUE, VALUE_VERSION, by_name=False,
                       error=TxnRecordError, classes=_CLASSES)


def _pack(version: int, body: list[Any]) -> bytes:
    return _VERSION.pack(version) + msgpack.packb(body, use_bin_type=True)


def _unpack(data: bytes, what: str) -> tuple[int, object]:
    if len(data) < 2:
        raise TxnRecordError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise TxnRecordError(f"{what}: unknown version {version}")
    try:
        body = msgpack.unpackb(data[2:], raw=False)
    except Exception as exc:
        raise TxnRecordError(f"{what} v{version}: not msgpack ({exc})") from None
    return version, body


def encode_key(transactional_id: str) -> bytes:
    return _pack(KEY_VERSION, _KEY_ARRAY(TxnKey(transactional_id)))


def decode_key(data: bytes) -> str:
    version, body = _unpack(data, "transaction key")
    if version != KEY_VERSION:
        raise TxnRecordError(f"transaction key: unknown version {version}")
    return _KEY_BUILD(body).transactional_id


def encode_value(meta: TxnMetadata) -> bytes:
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for topic, index in meta.partitions:
        by_topic[topic].append(index)
    value = TxnValue(meta.producer_id, meta.previous_producer_id, meta.next_producer_id,
                     meta.producer_epoch, meta.last_producer_epoch,
                     meta.transaction_timeout_ms, meta.state.id,
                     tuple(TxnPartitions(t, tuple(sorted(p))) for t, p in sorted(by_topic.items())),
                     meta.txn_start_timestamp_ms, meta.txn_last_update_timestamp_ms,
                     meta.client_transaction_version)
    return _pack(VALUE_VERSION, _VALUE_ARRAY(value))


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    version, body = _unpack(data, "transaction value")
    value = _VALUE_BUILD(body) if version == VALUE_VERSION else build_from_msgpack(
        TxnValue, body, TXN_VALUE, version, by_name=False, error=TxnRecordError,
        classes=_CLASSES)
    state = STATE_BY_ID.get(value.state)
    if state is None or state in (TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE):
        raise TxnRecordError(f"transaction value of {transactional_id!r}: state "
                             f"{value.state} is not a stored state")
    return TxnMetadata(transactional_id, value.producer_id, value.producer_epoch,
                       value.transaction_timeout_ms, state, value.previous_producer_id,
                       value.next_producer_id, value.last_producer_epoch,
                       frozenset(TopicPartition(p.topic, i) for p in value.partitions
                                 for i in p.partitions),
                       value.txn_start_timestamp_ms, value.txn_last_update_timestamp_ms,
                       value.client_transaction_version)
