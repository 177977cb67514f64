"""Fetch sessions (KIP-227): what a follower's and a consumer's Fetch cost over many
partitions of which few are active, with and without a session.

In one process: a leader :class:`broker.core.BrokerCore` (controller mode, its metadata
image written here) leads ``--partitions`` partitions of one topic (replicas 1, 2); a
follower (broker 2, ``replica_id`` 2; ISR 1, 2) or a consumer (``replica_id`` -1; ISR 1
alone, so the high watermark follows the leader's appends) fetches them all with our
:class:`clients.protocol.fetch_session.handler.FetchSessionHandler`, enabled (a full
fetch, then incremental ones) or not (every Fetch full and sessionless, epoch -1).
Before each Fetch, one 100 B record is appended to each of ``--active`` partitions (the
same ones every round).  Per Fetch (v12, ``max_wait_ms`` 0, ``min_bytes`` 0):

- request bytes: the encoded Fetch request frame;
- response bytes: the encoded response frame, file regions counted at their length
  (what the network process sends, records by ``sendfile``);
- leader CPU: ``time.process_time`` of decoding the request, the Fetch handler
  (:func:`broker.handlers.fetch.handle_fetch`, reading every partition of the session)
  and encoding the response (without copying records: they stay file regions).

Medians over ``--fetches`` Fetches after ``--warmup``.  Writes
``bench/results/fetch_sessions.json`` and ``.png``.  Run:
``python3 -m bench.fetch_sessions [--partitions 1000 --active 10 --fetches 50]``.
Costs: a few seconds, one core.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import plotting
from bench.cluster_lifecycle import machine_info
from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.handlers.common import RequestContext
from broker.handlers.fetch import handle_fetch
from broker.metadata.image import MetadataImage
from broker.metadata.records import (
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import decode_request, encode_request_bytes, encode_response
from clients.protocol.fetch_session.handler import FetchSessionHandler
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from timer.clock import ManualClock
from timer.system_timer import SystemTimer

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "fs"
VERSION = 12


def leader(root: Path, partitions: int, isr: tuple[int, ...]) -> BrokerCore:
    clock = ManualClock(1_000_000)
    config = BrokerConfig(node_id=1, data_dir=str(root / "b1"),
                          controller_address="127.0.0.1:1", max_fetch_partitions=partitions)
    core = BrokerCore(config, clock, SystemTimer(clock))
    core.startup()
    core.image = image = MetadataImage()
    records: list[MetadataRecord] = [
               RegisterBrokerRecord(1, 0, "a", "127.0.0.1", 9001),
               RegisterBrokerRecord(2, 1, "b", "127.0.0.1", 9002),
               UnfenceBrokerRecord(1, 0), UnfenceBrokerRecord(2, 1),
               TopicRecord(TOPIC, 4, partitions, 2)]
    records += [PartitionRecord(TOPIC, p, (1, 2), 1, 0, isr, 0) for p in range(partitions)]
    for record in records:
        image.apply(record, image.last_applied_offset + 1)
    core.reconcile()
    return core


def run(core: BrokerCore, replica_id: int, sessions: bool, partitions: int, active: int,
        fetches: int, warmup: int) -> dict[str, Any]:
    handler = FetchSessionHandler(enabled=sessions)
    offsets = {p: core.partitions[TopicPartition(TOPIC, p)].log_end_offset
               for p in range(partitions)}
    samples: dict[str, list[float]] = {"request_bytes": [], "response_bytes": [],
                                       "leader_cpu_us": [], "response_partitions": []}
    value = bytes(100)
    for i in range(warmup + fetches):
        for p in range(active):
            core.partitions[TopicPartition(TOPIC, p)].append_records_as_leader(
                build_batch([(None, value, 1, ())]))
        wanted = {(TOPIC, p): {"partition": p, "current_leader_epoch": 0,
                               "fetch_offset": offsets[p], "last_fetched_epoch": -1,
                               "log_start_offset": 0, "partition_max_bytes": 1 << 20}
                  for p in range(partitions)}
        data = handler.build(wanted)
        frame = encode_request_bytes(ApiKey.FETCH, VERSION, i, "bench", {
            "replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8 << 20,
            "isolation_level": 0, **data.fields()})
        answers: list[Any] = []
        start = time.process_time()
        request = decode_request(memoryview(frame)[4:])
        handle_fetch(core, request.body, answers.append, RequestContext(VERSION))  # type: ignore[arg-type]
        parts = encode_response(ApiKey.FETCH, VERSION, i, answers[0])
        cpu = time.process_time() - start
        body = answers[0]
        assert body["error_code"] == 0 and handler.handle_response(data, body)
        named = 0
        for t in body["responses"]:
            for p in t["partitions"]:
                named += 1
                if len(p["records"]):
                    offsets[p["partition_index"]] = core.partitions[
                        TopicPartition(TOPIC, p["partition_index"])].log_end_offset
        if i >= warmup:
            samples["request_bytes"].append(len(frame))
            samples["response_bytes"].append(sum(len(x) for x in parts))
            samples["leader_cpu_us"].append(cpu * 1e6)
            samples["response_partitions"].append(named)
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--active", type=int, default=10)
    parser.add_argument("--fetches", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for fetcher, replica_id, isr in (("follower", 2, (1, 2)), ("consumer", -1, (1,))):
        for mode, sessions in (("sessionless", False), ("sessions", True)):
            with tempfile.TemporaryDirectory() as root:
                core = leader(Path(root), args.partitions, isr)
                try:
                    results[f"{fetcher} {mode}"] = run(
                        core, replica_id, sessions, args.partitions, args.active,
                        args.fetches, args.warmup)
                finally:
                    core.shutdown()
    out = {"api": "Fetch v12, replica_id 2 (a follower) or -1 (a consumer), max_wait_ms 0, "
                  "min_bytes 0",
           "settings": vars(args) | {"record_bytes": 100, "records_per_active_partition":
                                     "1 per fetch"},
           "machine": machine_info(), "medians": results}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fetch_sessions.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["medians"], indent=2))
    drawn = plotting.figure(ncols=3, figsize=(13, 4))
    if drawn is not None:
        plt, fig, axes = drawn
        panels = (("request_bytes", "request bytes"), ("response_bytes", "response bytes"),
                  ("leader_cpu_us", "leader CPU per fetch (µs)"))
        for ax, (key, label) in zip(axes, panels, strict=True):
            modes = list(results)
            ax.bar(modes, [results[m][key] for m in modes], color=["#999", "#37a"] * 2)
            ax.set_title(label)
            ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        fig.suptitle(f"Fetch over {args.partitions} partitions, {args.active} "
                     f"active (medians of {args.fetches})")
        plotting.save(plt, fig, RESULTS / "fetch_sessions.png")


if __name__ == "__main__":
    main()
