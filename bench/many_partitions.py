"""A new topic of many partitions on a local cluster: how long until its first records
are acknowledged, and whether the brokers kept their leaders meanwhile.

A controller and 3 brokers (``broker.cluster``, 2 s heartbeat sessions) are started
here and stopped by PID at the end.  Each of ``--topics`` rounds creates one more topic
of ``--partitions`` partitions (RF 3, min ISR 2; the cluster grows by that much each
round) and at once sends ``--records`` keyed 100 B records to it with
``Producer.send`` (acks=all, idempotent, ``linger_ms`` 5), then ``flush()``.

Per round: seconds from CreateTopics to the last acknowledgment, the producer's retries
(``metrics()["retries"]``: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, ... while
leaders and ISRs settle), and how many of the topic's partitions were moved off their
first leader (leader epoch above the one they were created with: a fenced broker, or
an election) once the records are in.  Medians over the rounds, and every round.

Writes ``bench/results/many_partitions.json`` and ``.png`` (matplotlib).  Run:
``python3 -m bench.many_partitions [--partitions 200 --topics 3]``.  Costs: about
a minute; one run at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import plotting
from bench.cluster_lifecycle import machine_info, running_cluster
from clients.admin import Admin
from clients.producer.producer import Producer
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"


def one_round(bootstrap: str, name: str, partitions: int, records: int) -> dict[str, Any]:
    value = bytes(100)
    with Admin(bootstrap) as admin:
        start = time.perf_counter()
        admin.create_topics([NewTopic(name, partitions, 3, {"min.insync.replicas": "2"})])
        created = admin.describe_topics([name])[name].partitions
        with Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                      delivery_timeout_ms=120_000) as producer:
            futures = [producer.send(name, value, key=b"k%d" % i) for i in range(records)]
            producer.flush()
            seconds = time.perf_counter() - start
            failed = sum(f.exception(0) is not None for f in futures)
            retries = producer.metrics().get("retries", 0)
        first_epoch = {p.partition: p.leader_epoch for p in created}
        after = admin.describe_topics([name])[name].partitions
    moved = sum(p.leader_epoch > first_epoch[p.partition] for p in after)
    return {"seconds_to_all_acked": seconds, "producer_retries": retries,
            "failed_records": failed, "partitions_moved_off_first_leader": moved}


def plot(path: Path, rounds: list[dict[str, Any]], partitions: int) -> bool:
    drawn = plotting.figure()
    if drawn is None:
        return False
    plt, fig, ax = drawn
    ax.bar([f"{(i + 1) * partitions}" for i in range(len(rounds))],
           [r["seconds_to_all_acked"] for r in rounds])
    ax.set_xlabel("partitions in the cluster after the round's CreateTopics")
    ax.set_ylabel("s from CreateTopics to the last ack")
    ax.set_title(f"A new {partitions}-partition topic, then keyed send()s (acks=all)")
    return plotting.save(plt, fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-many-partitions-") as root, \
            running_cluster(root, 3) as state:
        time.sleep(1.0)  # registrations settle (heartbeats running)
        for i in range(args.topics):
            rounds.append(one_round(state.bootstrap, f"many-{i}", args.partitions,
                                    args.records))
            print(json.dumps(rounds[-1]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parent).stdout.strip()
    summary = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    RESULTS.mkdir(exist_ok=True)
    png = plot(RESULTS / "many_partitions.png", rounds, args.partitions)
    (RESULTS / "many_partitions.json").write_text(json.dumps({
        "bench": "many_partitions",
        "api": "Admin.create_topics, then Producer.send (acks=all, idempotent, keyed 100 B) "
               "and flush(); controller + 3 brokers, RF 3, min ISR 2",
        "config": vars(args), "commit": commit, "machine": machine_info(),
        "rounds": rounds, "medians": summary,
        "png": "many_partitions.png" if png else None}, indent=2) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
