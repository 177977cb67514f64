"""``minikafka bench produce|consume``: load a running broker, print a table, write JSON.

``bench produce`` sends ``--records`` values of ``--record-size`` bytes with the bulk API
(or record by record with ``--per-record``); ``bench consume`` reads a topic from the
beginning with the bulk poll.  Both show a progress bar on stderr and write their
figures to ``--json`` (default ``bench-<command>.json``).  The topic must exist: a
missing one fails ``consume`` at once and ``produce`` after ``max_block_ms`` (5 s, as
``minikafka produce``), one line each.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from clients.cli.connect.settings import admin_settings

if TYPE_CHECKING:
    from clients.producer.future import RecordFuture


class ThroughputBar:
    """A one-line bar on stderr (records done, percent, records/s), redrawn <= 10 times/s.

    Single-threaded: the bench command's own loop updates it.  Not the workload's
    :class:`~clients.workload.run.WorkloadProgress` (sent/acked/failed counts from many
    producer threads, log lines interleaved).
    """

    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total = max(total, 1)
        self.label = label
        self.width = width
        self.started = time.monotonic()
        self._last = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * self.width)
        rate = done / max(now - self.started, 1e-9)
        sys.stderr.write(f"\r{self.label} [{bar:<{self.width}}] {frac:6.1%} {rate:,.0f}/s")
        sys.stderr.flush()

    def close(self, done: int) -> None:
        self.update(done, force=True)
        sys.stderr.write("\n")


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    bench = client("bench", "measure produce or consume throughput against a broker")
    bench.add_argument("mode", choices=["produce", "consume"])
    bench.add_argument("--topic", default="bench")
    bench.add_argument("--records", type=int, default=1_000_000)
    bench.add_argument("--record-size", type=int, default=100)
    bench.add_argument("--batch-records", type=int, default=1000,
                       help="records per bulk send call")
    bench.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    bench.add_argument("--per-record", action="store_true", help="use send() per record")
    bench.add_argument("--json", default=None, help="result file (default bench-<mode>.json)")
    bench.set_defaults(func=run_bench)


def _produce(args: argparse.Namespace) -> dict[str, Any]:
    from clients.producer.producer import Producer

    acks: int | str = args.acks if args.acks == "all" else int(args.acks)
    value = b"x" * args.record_size
    progress = ThroughputBar(args.records, "produce")
    started = time.monotonic()
    sent = 0
    with Producer(bootstrap_servers=args.bootstrap_server, acks=acks, max_block_ms=5000,
                  batch_size=max(16384, args.batch_records * (args.record_size + 16)),
                  **admin_settings(args)) as producer:
        futures: list[Future[Any] | RecordFuture] = []
        while sent < args.records:
            n = min(args.batch_records, args.records - sent)
            if args.per_record:
                futures.extend(producer.send(args.topic, value, partition=0) for _ in range(n))
            else:
                futures.append(producer.send_bulk(args.topic, [value] * n, partition=0))
            sent += n
            progress.update(sent)
        producer.flush()
        for future in futures:
            future.result()
    elapsed = time.monotonic() - started
    progress.close(sent)
    return {"records": sent, "seconds": elapsed}


def _consume(args: argparse.Namespace) -> dict[str, Any]:
    from clients.cli.consume import partitions_of
    from clients.consumer.consumer import Consumer
    from clients.protocol.topics import TopicPartition

    progress = ThroughputBar(args.records, "consume")
    started = time.monotonic()
    received = 0
    with Consumer(bootstrap_servers=args.bootstrap_server, auto_offset_reset="earliest",
                  max_partition_fetch_bytes=8 * 1024 * 1024, **admin_settings(args)) as consumer:
        partitions = [TopicPartition(args.topic, p)
                      for p in partitions_of(consumer, args.topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(partitions)
        idle_deadline = time.monotonic() + 10
        while received < args.records and time.monotonic() < idle_deadline:
            for bulk in consumer.poll_bulk(timeout_ms=500).values():
                received += len(bulk)
                idle_deadline = time.monotonic() + 10
            progress.update(received)
    elapsed = time.monotonic() - started
    progress.close(received)
    return {"records": received, "seconds": elapsed}


def run_bench(args: argparse.Namespace) -> int:
    result = _produce(args) if args.mode == "produce" else _consume(args)
    records, seconds = result["records"], max(result["seconds"], 1e-9)
    figures = {
        "records_per_s": records / seconds,
        "mb_per_s": records * args.record_size / seconds / 1e6,
        "us_per_record": seconds / max(records, 1) * 1e6,
    }
    print(f"{'mode':<10}{'records':>12}{'seconds':>10}{'records/s':>14}{'MB/s':>10}")
    print(f"{args.mode:<10}{records:>12,}{seconds:>10.2f}"
          f"{figures['records_per_s']:>14,.0f}{figures['mb_per_s']:>10.1f}")
    path = args.json or f"bench-{args.mode}.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"config": {k: v for k, v in vars(args).items() if k != "func"},
                   "machine": {"python": platform.python_version(),
                               "platform": platform.platform()},
                   "result": result, "figures": figures}, f, indent=2)
    print(f"wrote {path}")
    return 0
