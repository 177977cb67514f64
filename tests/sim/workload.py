"""The simulation's clients: the producer's and the consumer's state (what was sent,
acknowledged and consumed: the oracle the invariants check replicas against) and the
idempotent producer's batch in flight.

Plain data driven by :meth:`tests.sim.cluster.SimCluster.produce` and ``consume``; no I/O.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

IDEMPOTENT_ID = 7000  # the idempotent producer's producer id (no InitProducerId here)


@dataclass
class SimProducer:
    """Fire-and-forget records, or (``idempotent``) one batch in flight per partition,
    retried with its sequence until acknowledged, as an idempotent Kafka producer with
    ``max.in.flight`` 1; a sequence the leader does not expect bumps the epoch (KIP-360)."""
    next_request: int = 0
    acked: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # see kept()
    sent: int = 0
    retries: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    producer_epoch: int = 0
    next_sequence: dict[int, int] = field(default_factory=dict)       # pid -> sequence
    in_flight: dict[int, IdempotentSend] = field(default_factory=dict)  # pid -> its batch


@dataclass
class IdempotentSend:
    key: bytes | None
    value: bytes | None
    producer_epoch: int
    sequence: int
    batch: bytes
    sent_ms: int


@dataclass
class SimConsumer:
    position: dict[int, int] = field(default_factory=dict)             # pid -> next offset
    consumed: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # kept()
    fetches: int = 0

