"""The confluent pipeline session never reports a position left over from an earlier
assignment of a partition (clients/workload/confluent_pipeline.py).

librdkafka (2.16, measured against our brokers) keeps a partition's position across a
revoke and a later re-assignment until it delivers a record of it again: a member that
read A-0 to 5, lost it to a member that committed 20, and got it back reports
``position`` 5.  The pipeline worker commits the positions of every assigned partition,
also in a transaction of offsets only, so that stale 5 went to the group: its committed
offset went back from 20 to 5, and the next reader of it (a rewind after an abort, a new
owner after the next rebalance) processed 5..20 again: B duplicated them (the CI failure
"pipeline duplicated 96" after a whole-cluster crash, which sets off rebalances).

A stand-in for ``confluent_kafka.Consumer`` that behaves as librdkafka does here (serves
rebalance callbacks inside ``consume``, keeps the delivered position across a
re-assignment) drives :class:`~clients.workload.confluent_pipeline.ConfluentSession`.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients.workload import confluent_pipeline
from clients.workload.confluent_pipeline import ConfluentSession

confluent_kafka = pytest.importorskip("confluent_kafka")
TOPIC = "a"
INVALID = -1001  # librdkafka's OFFSET_INVALID: no position


class Message:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def error(self) -> None:
        return None


class LibrdkafkaConsumer:
    """``confluent_kafka.Consumer`` as librdkafka behaves for this test: rebalance
    callbacks run inside ``consume`` (then the assignment changes, as confluent-kafka
    does when the callback does not assign itself); the position of a partition is the
    offset after its last delivered record, kept across a revoke and a re-assignment
    until a record of it is delivered again; ``seek`` clears it."""

    last: LibrdkafkaConsumer

    def __init__(self, config: dict[str, Any]) -> None:
        self.assigned: list[int] = []
        self.delivered: dict[int, int] = {}
        self.callbacks: dict[str, Any] = {}
        self.rebalances: list[tuple[str, list[int]]] = []
        self.fetched: list[Message] = []
        LibrdkafkaConsumer.last = self

    def subscribe(self, topics: list[str], on_assign: Any = None, on_revoke: Any = None,
                  on_lost: Any = None) -> None:
        self.callbacks = {"assign": on_assign, "revoke": on_revoke}

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        while self.rebalances:
            kind, partitions = self.rebalances.pop(0)
            callback = self.callbacks.get(kind)
            if callback is not None:
                callback(self, [confluent_kafka.TopicPartition(TOPIC, p) for p in partitions])
            self.assigned = (sorted(set(self.assigned) | set(partitions)) if kind == "assign"
                             else [p for p in self.assigned if p not in partitions])
        out = [m for m in self.fetched if m.partition() in self.assigned][:num_messages]
        self.fetched = [m for m in self.fetched if m not in out]
        for m in out:
            self.delivered[m.partition()] = m.offset() + 1
        return out

    def assignment(self) -> list[Any]:
        return [confluent_kafka.TopicPartition(TOPIC, p) for p in self.assigned]

    def position(self, partitions: list[Any]) -> list[Any]:
        return [confluent_kafka.TopicPartition(TOPIC, tp.partition,
                                               self.delivered.get(tp.partition, INVALID))
                for tp in partitions]

    def seek(self, tp: Any) -> None:
        self.delivered.pop(tp.partition, None)

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        return [confluent_kafka.TopicPartition(TOPIC, tp.partition, 3) for tp in partitions]

    def close(self) -> None:
        pass


class Producer:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def init_transactions(self) -> None:
        pass

    def close(self, timeout_s: float) -> None:
        pass


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> tuple[ConfluentSession, LibrdkafkaConsumer]:
    monkeypatch.setattr(confluent_kafka, "Consumer", LibrdkafkaConsumer)
    monkeypatch.setattr(confluent_pipeline, "ConfluentTxnProducer", Producer)
    made = ConfluentSession("127.0.0.1:1", TOPIC, "g", "pipeline-run-0", 20_000, {})
    return made, LibrdkafkaConsumer.last


def test_a_partition_got_back_has_no_position_until_it_delivers_again(
        session: tuple[ConfluentSession, LibrdkafkaConsumer]) -> None:
    s, consumer = session
    consumer.rebalances.append(("assign", [0, 1]))
    consumer.fetched = [Message(0, o) for o in range(5)]
    assert len(s.poll(0.1, 50)) == 5
    assert s.positions() == {0: 5}  # partition 1 delivered nothing: no position
    # another member owns partition 0 for a while (and commits 20), then it comes back
    consumer.rebalances += [("revoke", [0, 1]), ("assign", [1])]
    assert s.poll(0.1, 50) == [] and s.positions() == {}
    consumer.rebalances += [("revoke", [1]), ("assign", [0, 1])]
    assert s.poll(0.1, 50) == []
    assert [tp.offset for tp in consumer.position(consumer.assignment())] == [5, INVALID]
    assert s.positions() == {}  # librdkafka says 5: stale, below the group's 20
    consumer.fetched = [Message(0, 20)]
    assert len(s.poll(0.1, 50)) == 1
    assert s.positions() == {0: 21}


def test_a_rewound_partition_has_no_position_until_it_delivers_again(
        session: tuple[ConfluentSession, LibrdkafkaConsumer]) -> None:
    s, consumer = session
    consumer.rebalances.append(("assign", [0]))
    consumer.fetched = [Message(0, o) for o in range(5)]
    s.poll(0.1, 50)
    s.rewind()  # to the committed 3
    assert s.positions() == {}
    consumer.fetched = [Message(0, 3)]
    s.poll(0.1, 50)
    assert s.positions() == {0: 4}
