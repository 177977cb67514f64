"""The leader's handler CPU per acks=all produce, in one process: issue 36.

A :class:`BrokerCore` in controller mode (broker 1 leads one partition with replicas 1,
2, 3, all in the ISR; manual clock) runs the leader's side of one acks=all round trip
per *cycle*, calling the handlers as the main process does (bodies decoded by Kafka's
codec at our highest versions, outside the timing): brokers 2 and 3 fetch at the log
end (parked), a Produce of one 100 B record (acks=-1) appends and completes both parked
fetches, then broker 2's and broker 3's next fetches move the HW, the second one
completing the Produce.  Timed with ``time.process_time`` over ``--cycles`` cycles: the
figure is CPU microseconds per cycle of the leader's handlers (no network process, no
channel, no other broker), so it moves with the code, not with the machine's load.

Two source trees, alternated (``--before`` / ``--after``, ``--rounds`` each, a child
process per run with ``PYTHONPATH`` set to the tree, as :mod:`bench.acks_latency`).
Writes ``bench/results/acks_all_handlers.json``.
Run: ``python3 bench/acks_all_handlers.py --before /tmp/base --after .``.

Costs: O(cycles) appends to a temporary directory.  Not thread-safe.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "h"


def one_run(cycles: int) -> dict[str, Any]:
    from broker.config import BrokerConfig
    from broker.core import BrokerCore
    from broker.handlers.common import RequestContext
    from broker.handlers.dispatch import HANDLERS
    from broker.metadata.records import (
        PartitionRecord,
        RegisterBrokerRecord,
        TopicRecord,
        UnfenceBrokerRecord,
    )
    from clients.protocol.api_keys import ApiKey
    from clients.protocol.codec import decode_request, encode_request_bytes
    from clients.protocol.registry import APIS
    from clients.records.record import build_batch
    from tests.broker.image_feed import ImageFeed
    from timer.clock import ManualClock
    from timer.system_timer import SystemTimer

    def decoded(api: int, body: dict[str, Any]) -> dict[str, Any]:
        frame = encode_request_bytes(api, APIS[api].max_version, 7, "bench", body)
        return dict(decode_request(memoryview(frame)[4:]).body)

    with tempfile.TemporaryDirectory(prefix="minikafka-bench-handlers-") as root:
        clock = ManualClock()
        core = BrokerCore(BrokerConfig(node_id=1, data_dir=root,
                                       controller_address="127.0.0.1:9"),
                          clock, SystemTimer(clock))
        core.startup()
        ImageFeed(core).apply(
            *[RegisterBrokerRecord(b, b - 1, f"n{b}", "127.0.0.1", 9000 + b)
              for b in (1, 2, 3)],
            *[UnfenceBrokerRecord(b, b - 1) for b in (1, 2, 3)],
            TopicRecord(TOPIC, 7, 1, 3),
            PartitionRecord(TOPIC, 0, (1, 2, 3), 1, 0, (1, 2, 3), 0))
        fetch = {b: decoded(ApiKey.FETCH, {
            "replica_id": b, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
            for b in (2, 3)}
        produces = [decoded(ApiKey.PRODUCE, {
            "acks": -1, "timeout_ms": 30_000, "transactional_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"index": 0, "records": build_batch([(None, b"x" * 100, 1, ())])}]}]})
            for _ in range(cycles)]
        fetch_ctx = RequestContext(APIS[ApiKey.FETCH].max_version, "bench")
        produce_ctx = RequestContext(APIS[ApiKey.PRODUCE].max_version, "bench")
        answered: list[Any] = []

        def follower(broker: int, offset: int) -> None:
            body = dict(fetch[broker])
            body["topics"] = [{"name": TOPIC, "partitions": [
                dict(fetch[broker]["topics"][0]["partitions"][0], fetch_offset=offset)]}]
            HANDLERS[ApiKey.FETCH](core, body, answered.append, fetch_ctx)

        follower(2, 0)
        follower(3, 0)
        started = time.process_time()
        for i, body in enumerate(produces):
            HANDLERS[ApiKey.PRODUCE](core, body, answered.append, produce_ctx)
            follower(2, i + 1)
            follower(3, i + 1)
        cpu_s = time.process_time() - started
        hw = core.partitions[next(iter(core.partitions))].high_watermark
        core.shutdown()
    if hw != cycles or len(answered) < 3 * cycles:
        raise RuntimeError(f"the cycles did not complete: HW {hw}, {len(answered)} answers")
    return {"cpu_us_per_cycle": cpu_s / cycles * 1e6, "cycles": cycles}


def _run_tree(root: str, cycles: int) -> float:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(root))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", root,
                          "--cycles", str(cycles)], env=env, cwd=root, check=True,
                         capture_output=True, text=True, timeout=600)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["cpu_us_per_cycle"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", help="(child) measure the tree on sys.path")
    parser.add_argument("--before", default="/tmp/latency-base")
    parser.add_argument("--before-commit", default="?")
    parser.add_argument("--after", default=".")
    parser.add_argument("--after-commit", default="?")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--out", default=str(RESULTS / "acks_all_handlers.json"))
    args = parser.parse_args()
    if args.one:  # bench/ itself is sys.path[0] (its broker.py would shadow the package)
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        print(json.dumps(one_run(args.cycles)))
        return 0
    sides: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            sides[side].append(_run_tree(getattr(args, side), args.cycles))
            print(f"round {i} {side}: {sides[side][-1]:.1f} us CPU per cycle", flush=True)
    result = {
        "what": "the leader's handlers per acks=all cycle (Produce of one 100 B record, "
                "acks=-1, RF 3; two parked follower fetches completed by it; two follower "
                "fetches moving the HW and completing it), time.process_time, one process",
        "cycles_per_run": args.cycles, "rounds": args.rounds, "alternated": True,
        "before": {"tree": args.before, "commit": args.before_commit,
                   "cpu_us_per_cycle": statistics.median(sides["before"]),
                   "runs": sides["before"]},
        "after": {"tree": args.after, "commit": args.after_commit,
                  "cpu_us_per_cycle": statistics.median(sides["after"]),
                  "runs": sides["after"]},
        "machine": {"cpus": os.cpu_count(), "load_avg_end": list(os.getloadavg())},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for side in ("before", "after"):
        print(f"{side} ({result[side]['commit']}): "
              f"{result[side]['cpu_us_per_cycle']:.1f} us CPU per cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
