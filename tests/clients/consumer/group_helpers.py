"""Helpers shared by the consumer group tests: a recording rebalance listener and a
thread that polls one consumer (each consumer belongs to one thread)."""

from __future__ import annotations

import threading

from clients.consumer.consumer import Consumer
from clients.consumer.offset_committer import CommitFailedError
from clients.protocol.topics import TopicPartition
from clients.types import ConsumerRecord


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))


class Runner(threading.Thread):
    """Polls one consumer in its own thread (each consumer belongs to one thread)."""

    def __init__(self, consumer: Consumer, topics: list[str], commit: bool = False) -> None:
        super().__init__(daemon=True)
        self.consumer, self.topics, self.commit = consumer, topics, commit
        self.listener = Listener()
        self.records: list[ConsumerRecord] = []
        self.assignment: set[TopicPartition] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.failed_commits = 0

    def run(self) -> None:
        try:
            self.consumer.subscribe(self.topics, self.listener)
            while not self.stop.is_set():
                batch = self.consumer.poll(timeout_ms=50)
                for records in batch.values():
                    self.records.extend(records)  # "processing"
                self.assignment = self.consumer.assignment()
                if self.commit and batch:  # after processing: at-least-once
                    offsets = {tp: rs[-1].offset + 1 for tp, rs in batch.items()}
                    try:
                        self.consumer.commit(offsets)
                    except CommitFailedError:
                        self.failed_commits += 1  # rebalanced: redelivered to the new owner
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.consumer.close()

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive()
        if self.error is not None:
            raise self.error
