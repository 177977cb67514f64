"""Idempotent-producer state of the fake broker (tests/clients/fake_broker.py).

A small model of the broker contract the idempotent producer relies on (the real
broker keeps the same rules in replication/): per partition and producer id, the epoch
and the last 5 batches (first sequence, last sequence, base offset).  For a batch with
a producer id (>= 0):

- no state for the producer: accepted when its base sequence is 0, else
  UNKNOWN_PRODUCER_ID;
- epoch older than the state's: INVALID_PRODUCER_EPOCH;
- newer epoch: accepted when its base sequence is 0 (the state restarts), else
  OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch: equal (first, last) to one of the last 5 batches is a duplicate (answered
  with error 0 and the original base offset, nothing appended); a base sequence right
  after the last batch's is accepted; anything else is OUT_OF_ORDER_SEQUENCE_NUMBER.

Not thread-safe by itself: the fake calls it under its condition variable.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from clients.protocol.errors import ErrorCode
from clients.records.batch import BatchHeader

SEQUENCE_MODULUS = 1 << 31
WINDOW = 5


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=WINDOW))


@dataclass
class Verdict:
    code: int = 0  # error code, 0 = accept
    duplicate_offset: int = -1  # >= 0: a duplicate of the batch at this base offset


class ProducerStateTable:
    """Producer id -> state for one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.duplicates = 0

    def check(self, header: BatchHeader) -> Verdict:
        """Validate one batch header (nothing is changed)."""
        pid = header.producer_id
        if pid < 0:
            return Verdict()
        first = header.base_sequence
        last = (first + header.last_offset_delta) % SEQUENCE_MODULUS
        entry = self.producers.get(pid)
        if entry is None:
            return Verdict() if first == 0 else Verdict(int(ErrorCode.UNKNOWN_PRODUCER_ID))
        if header.producer_epoch < entry.epoch:
            return Verdict(int(ErrorCode.INVALID_PRODUCER_EPOCH))
        if header.producer_epoch > entry.epoch:
            return Verdict() if first == 0 else Verdict(int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
        for b_first, b_last, offset in entry.batches:
            if (b_first, b_last) == (first, last):
                return Verdict(duplicate_offset=offset)
        expected = (entry.batches[-1][1] + 1) % SEQUENCE_MODULUS if entry.batches else 0
        if first != expected:
            return Verdict(int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER))
        return Verdict()

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Remember an appended batch (after :meth:`check` accepted it)."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(header.producer_epoch)
        first = header.base_sequence
        last = (first + header.last_offset_delta) % SEQUENCE_MODULUS
        entry.batches.append((first, last, base_offset))


class ProducerIdRegistry:
    """InitProducerId: new ids from 1000 with epoch 0; (id, epoch) bumps the epoch."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}
        self._next_id = 1000

    def init(self, producer_id: int, producer_epoch: int) -> tuple[int, int, int]:
        """``(error_code, producer_id, producer_epoch)``."""
        if producer_id < 0:
            pid = self._next_id
            self._next_id += 1
            self.epochs[pid] = 0
            return 0, pid, 0
        current = self.epochs.get(producer_id)
        if current is None or current != producer_epoch:
            return int(ErrorCode.INVALID_PRODUCER_EPOCH), -1, -1
        self.epochs[producer_id] = current + 1
        return 0, producer_id, current + 1
