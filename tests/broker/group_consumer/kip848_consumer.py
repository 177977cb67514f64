"""A confluent-kafka consumer with ``group.protocol=consumer`` (KIP-848), run as its own
process by tests/broker/group_consumer/test_kip848_confluent.py so a test can SIGKILL it.

``python -m tests.broker.group_consumer.kip848_consumer BOOTSTRAP GROUP TOPIC``: consumes,
commits synchronously after every poll batch and prints ``COMMIT <partition> <offset>``
for each committed offset (flushed), ``READY`` once subscribed; SIGTERM closes the
consumer (it leaves the group: ConsumerGroupHeartbeat with epoch -1) and exits.
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition


def main(bootstrap: str, group: str, topic: str) -> None:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    print("READY", flush=True)
    while not stopping:
        messages = consumer.consume(100, 0.2)
        last: dict[int, int] = {}
        for m in messages:
            if m.error() is None:
                last[m.partition()] = m.offset() + 1
        if not last:
            continue
        offsets = [TopicPartition(topic, p, o) for p, o in last.items()]
        try:
            committed = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # e.g. STALE_MEMBER_EPOCH during a rebalance
            print(f"COMMIT-FAILED {exc}", flush=True)
            continue
        for tp in committed or []:
            if tp.error is None:
                print(f"COMMIT {tp.partition} {tp.offset}", flush=True)
    consumer.close()
    print("CLOSED", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
