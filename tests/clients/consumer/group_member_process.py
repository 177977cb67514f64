"""A consumer group member run as its own process (SIGKILLed by tests and benchmarks).

``python -m tests.clients.consumer.group_member_process BOOTSTRAP GROUP TOPIC OUT [SESSION_MS]``
subscribes, appends ``partition offset`` per record to OUT (flushed and fsync'd), then
commits what it wrote (at-least-once), and writes ``assigned p,p,...`` lines on every
assignment change.  It runs until killed.
"""

from __future__ import annotations

import os
import sys

from clients.consumer.consumer import Consumer
from clients.protocol.topics import TopicPartition


def main(argv: list[str]) -> int:
    bootstrap, group, topic, out = argv[:4]
    session_ms = int(argv[4]) if len(argv) > 4 else 2000
    with open(out, "a", buffering=1) as f, Consumer(
        bootstrap, group_id=group, session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(50, session_ms // 6), enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, retry_backoff_ms=50,
    ) as consumer:  # fmt: skip
        consumer.subscribe([topic])
        assigned: set[TopicPartition] = set()
        while True:
            batch = consumer.poll(timeout_ms=200)
            if consumer.assignment() != assigned:
                assigned = consumer.assignment()
                parts = ",".join(str(tp.partition) for tp in sorted(assigned))
                f.write(f"assigned {parts}\n")
            if not batch:
                continue
            for records in batch.values():
                for r in records:
                    f.write(f"{r.partition} {r.offset}\n")
            f.flush()
            os.fsync(f.fileno())
            consumer.commit({tp: rs[-1].offset + 1 for tp, rs in batch.items()})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
