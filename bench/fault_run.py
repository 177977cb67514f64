"""A fault run of our own (issue 17's "done when"): acknowledged records under process
kills, whole-cluster crashes, torn tails and bit flips on one replica at a time.

A local cluster (3 brokers, controller, ``broker.cluster``) holds topic ``faults``: 3
partitions, RF 3, ``min.insync.replicas=2``, 256 KiB segments (so there are closed
segments to damage).  A producer thread (our ``Producer``: idempotent, acks=all, one
``send()`` per record, values ``p<partition>-<seq>`` padded to 100 B) runs for the whole
run and keeps every acknowledged ``(partition, offset) -> value``.  The main thread
injects one fault per round, in turn (the seed is printed; ``--seed`` replays the
choice of brokers, partitions and positions):

* ``kill``: SIGKILL one broker, restart it after 1-3 s;
* ``crash_torn``: SIGKILL every broker, wait until the controller has fenced them all
  (one by one, as their sessions expire: one partition's ISR is down to its last
  member), cut 1-500 bytes off that last ISR member's active segment of the partition
  (a torn write; the cut ends inside a batch, as a torn write does: one at a batch
  boundary leaves no trace for recovery to report, docs/replication.md), and restart the
  brokers in a random order, 0-3 s apart (issue 30, item 11: the safe election must
  hand the partition to a replica holding more, whatever the order);
* ``crash_flip``: the same, but flip 3 bytes in the second half of that active segment;
* ``flip_closed``: SIGKILL one broker, flip 3 bytes in the middle of one of its closed
  segments (the scrubber's job), restart it; every other time that segment's index file
  is lost too, so its log recovery rescans the segment and finds the flip itself (it
  keeps the damaged segment and every later one, and the broker repairs it in place).

Between rounds it waits until every partition has a leader again (up to 60 s; a round
that does not get there is counted as ``stuck_rounds``).  At the end, faults stop, the
cluster gets up to 120 s to bring every ISR back to 3, then the time one scrub round
takes over the largest replica's bytes (at the default 8 MiB/s, plus 20 s) so the last
flips in closed segments are found and repaired, and a consumer reads every partition
from offset 0.  Figures: records acknowledged, **lost** (acknowledged, then
absent or different: must be 0), **unreadable** (records of batches the consumer got a
CRC error for, skipped by seeking past them: must be 0), damage injected per kind, and
what the brokers and the controller say they repaired (recovery cuts, damage recovery
kept in place for a repair, segment repairs
begun and finished in place, repairs that fell back to cutting the log, safe elections,
leaders that resigned to repair) from their logs.

Writes ``bench/results/fault_run.json`` (``--out``; with each partition's leader, ISR
and replica offsets at the end).  Every process is stopped by PID at the end; the data and logs are
kept (path printed) when something was lost or unreadable.
The controller runs preferred-leader elections every ``--preferred-check-ms`` (default
2000; the controller's own default is 30 s): a whole-cluster crash's restarts then
always see some, as item 11's loss needed one while the safe election still waited.
Run: ``python -m bench.fault_run [--duration-s 600] [--seed N] [--faults crash_torn,...]
[--out FILE]``.

Costs: the run's duration plus up to a few minutes of settling and reading back.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.cluster_lifecycle import machine_info, running_cluster
from broker.cluster import launcher as cluster_cli
from broker.cluster.state import ClusterState
from broker.cluster.status import fetch_cluster_view, status_report
from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.protocol.errors import CorruptRecordError, MiniKafkaError
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from clients.types import NewTopic

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "faults"
PARTITIONS = 3
_BAD_BATCH = re.compile(r"at offsets (\d+)\.\.(\d+)")
FAULTS = ("kill", "crash_torn", "crash_flip", "flip_closed")
SCRUB_BYTES_PER_S = 8 << 20  # the brokers' default log_scrub_bytes_per_second
PRODUCER = {"acks": "all", "enable_idempotence": True, "linger_ms": 5,
            "request_timeout_ms": 3000, "retry_backoff_ms": 100,
            "delivery_timeout_ms": 120_000, "max_block_ms": 120_000}


class ProduceLoop:
    """Sends numbered records round-robin over the partitions; keeps what was acked."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="produce", daemon=True)
        self._bootstrap = bootstrap

    def _run(self) -> None:
        with Producer(self._bootstrap, **PRODUCER) as producer:  # type: ignore[arg-type]
            seq = 0
            while not self._stop.is_set():
                pending = []
                for _ in range(300):
                    partition = seq % PARTITIONS
                    value = f"p{partition}-{seq}".encode().ljust(100, b".")
                    pending.append((partition, value,
                                    producer.send(TOPIC, value, partition=partition)))
                    seq += 1
                for partition, value, future in pending:
                    try:
                        meta = future.result(180)
                    except Exception:
                        self.failed += 1
                        continue
                    self.acked[(partition, meta.offset)] = value

    def __enter__(self) -> ProduceLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(300)


def _cli(state: ClusterState, *args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = cluster_cli.main([*args, "--data-dir", state.data_dir])
    if code != 0:
        raise RuntimeError(f"cluster {' '.join(args)} failed")


def _partitions(state: ClusterState) -> list[dict[str, Any]]:
    for topic in fetch_cluster_view(state)["topics"]:
        if topic["name"] == TOPIC:
            return list(topic["partitions"])
    return []


def _wait(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except MiniKafkaError:
            pass
        time.sleep(0.2)
    return False


def _all_led(state: ClusterState) -> bool:
    parts = _partitions(state)
    return len(parts) == PARTITIONS and all(p["leader_id"] >= 0 for p in parts)


def _all_fenced(state: ClusterState) -> bool:
    parts = _partitions(state)
    return bool(parts) and all(p["leader_id"] < 0 for p in parts)


def _segments(state: ClusterState, broker: str, partition: int) -> list[Path]:
    return sorted(Path(state.brokers[broker].data_dir, f"{TOPIC}-{partition}").glob("*.log"))


def _flip(path: Path, rng: random.Random, low: float, high: float) -> bool:
    size = path.stat().st_size
    if size < 1024:
        return False
    with open(path, "r+b") as f:
        for _ in range(3):
            at = rng.randrange(int(size * low), int(size * high))
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ 0xFF]))
    return True


def _tear(path: Path, rng: random.Random) -> int:
    """Cut 1-500 bytes off ``path`` so that it ends inside a batch; the bytes cut."""
    data = path.read_bytes()
    starts = {pos for pos, _ in iter_batches(data, validate=False)} | {len(data)}
    sizes = [n for n in range(max(0, len(data) - 500), len(data)) if n not in starts]
    if not sizes:
        return 0
    kept = rng.choice(sizes)
    with open(path, "r+b") as f:
        f.truncate(kept)
    return len(data) - kept


def _crash(state: ClusterState, rng: random.Random, flip: bool) -> str:
    names = sorted(state.brokers)
    order = rng.sample(names, len(names))
    for name in order:
        _cli(state, "kill", name)
    if not _wait(lambda: _all_fenced(state), 30):
        return "not fenced"
    partition = rng.randrange(PARTITIONS)
    isr: list[int] = next((p["isr_nodes"] for p in _partitions(state)
                           if p["partition_index"] == partition), [])
    victim = str(isr[0]) if len(isr) == 1 else order[-1]  # its last ISR member
    segments = _segments(state, victim, partition)
    done = "nothing to damage"
    if segments:
        active = segments[-1]
        if flip:
            done = "flipped" if _flip(active, rng, 0.5, 1.0) else done
        else:
            done = f"cut {_tear(active, rng)} B"
    restarts = rng.sample(names, len(names))
    for name in restarts:
        time.sleep(rng.uniform(0, 3))
        _cli(state, "restart", name)
    return (f"{victim} (ISR {isr}) {TOPIC}-{partition}: {done}; restarted "
            f"{', '.join(restarts)}")


def _one_fault(state: ClusterState, kind: str, rng: random.Random) -> str:
    names = sorted(state.brokers)
    if kind == "kill":
        victim = rng.choice(names)
        _cli(state, "kill", victim)
        time.sleep(rng.uniform(1, 3))
        _cli(state, "restart", victim)
        return victim
    if kind in ("crash_torn", "crash_flip"):
        return _crash(state, rng, kind == "crash_flip")
    victim = rng.choice(names)
    partition = rng.randrange(PARTITIONS)
    _cli(state, "kill", victim)
    closed = _segments(state, victim, partition)[:-1]
    done = "no closed segment"
    segment = rng.choice(closed) if closed else None
    if segment is not None and _flip(segment, rng, 0.4, 0.6):
        done = "flipped"
        if rng.random() < 0.5:  # its index lost too: recovery rescans it, finds the flip
            segment.with_suffix(".index").unlink(missing_ok=True)
            done += ", index removed"
    _cli(state, "restart", victim)
    return f"{victim} {TOPIC}-{partition}: {done}"


def _largest_replica_bytes(state: ClusterState) -> int:
    return max(sum(p.stat().st_size for p in Path(info.data_dir).glob(f"{TOPIC}-*/*.log"))
               for info in state.brokers.values())


def _read_back(bootstrap: str, acked: dict[tuple[int, int], bytes]) -> dict[str, Any]:
    ends = Counter[int]()
    for partition, offset in acked:
        ends[partition] = max(ends[partition], offset + 1)
    got: dict[tuple[int, int], bytes | None] = {}
    bad: set[tuple[int, int]] = set()  # offsets in batches that failed their CRC
    unreadable = 0
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        for partition in range(PARTITIONS):
            tp = TopicPartition(TOPIC, partition)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            position, deadline = 0, time.monotonic() + 120
            while position < ends[partition] and time.monotonic() < deadline:
                try:
                    batch = consumer.poll(timeout_ms=500)
                except CorruptRecordError as exc:
                    found = _BAD_BATCH.search(str(exc))
                    first, last = (int(found[1]), int(found[2])) if found else (position,
                                                                                 position)
                    unreadable += last - first + 1
                    bad.update((partition, o) for o in range(first, last + 1))
                    print(f"  unreadable: {exc}")
                    position = last + 1
                    consumer.seek(tp, position)
                    continue
                for records in batch.values():
                    for r in records:
                        got[(partition, r.offset)] = r.value
                        position = r.offset + 1
            if position < ends[partition]:
                print(f"  {TOPIC}-{partition}: read up to {position}, acknowledged up to "
                      f"{ends[partition]}")
    lost = [key for key, value in acked.items() if got.get(key) != value and key not in bad]
    return {"lost": len(lost), "lost_first": sorted(lost)[:5], "unreadable": unreadable,
            "read": len(got)}


def _repairs(state: ClusterState) -> dict[str, int]:
    counts: Counter[str] = Counter()
    root = Path(state.data_dir)
    for log_file in root.glob("*.log"):
        for line in log_file.read_text(errors="replace").splitlines():
            if "recovery cut" in line:
                counts["recovery_cuts"] += 1
            elif "recovery found offsets" in line and "kept with every later segment" in line:
                counts["damage_kept_by_recovery"] += 1
            elif "rewriting that segment from leader" in line:
                counts["scrubber_repairs_begun"] += 1
            elif "damaged segment" in line and "repaired from leader" in line:
                counts["segments_repaired_in_place"] += 1
            elif "fetching the rest again" in line:
                counts["repairs_by_cutting_the_log"] += 1
            elif "with the longest log of the latest epoch, leads" in line:
                counts["safe_elections"] += 1
            elif "damaged on this leader" in line and "resigning" in line:
                counts["leaders_resigned_to_repair"] += 1
            elif "damaged on this leader" in line:
                counts["damage_found_on_leaders_unrepaired"] += 1
    return dict(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=600)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--faults", default=",".join(FAULTS),
                        help="the kinds injected, in turn (comma-separated): "
                        + ", ".join(FAULTS))
    parser.add_argument("--preferred-check-ms", type=int, default=2000,
                        help="the controller's leader_imbalance_check_interval_ms")
    parser.add_argument("--out", type=Path, default=RESULTS / "fault_run.json",
                        help="the JSON to write")
    args = parser.parse_args()
    faults = args.faults.split(",")
    if not faults or not set(faults) <= set(FAULTS):
        parser.error(f"--faults: choose from {', '.join(FAULTS)}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"fault run: seed {seed}, {args.duration_s:.0f} s")
    rng = random.Random(seed)
    injected: Counter[str] = Counter()
    stuck = 0
    started = time.monotonic()
    root = tempfile.mkdtemp(prefix=f"fault-run-{seed}-")
    with running_cluster(root, 3, controller_overrides={
            "leader_imbalance_check_interval_ms": args.preferred_check_ms}) as state:
        with Admin(state.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {
                "min.insync.replicas": "2", "segment.bytes": str(256 * 1024)})])
        with ProduceLoop(state.bootstrap) as producer:
            time.sleep(5)
            rounds = 0
            while time.monotonic() - started < args.duration_s:
                kind = faults[rounds % len(faults)]
                rounds += 1
                what = _one_fault(state, kind, rng)
                injected[kind] += 1
                ok = _wait(lambda: _all_led(state), 60)
                stuck += not ok
                print(f"[{time.monotonic() - started:6.0f} s] {kind}: {what}; "
                      f"{'led' if ok else 'NOT LED after 60 s'}; acked {len(producer.acked)}")
                time.sleep(rng.uniform(3, 8))
        settled = _wait(lambda: all(len(p["isr_nodes"]) == 3 for p in _partitions(state)),
                        120)
        # the scrubbers need one round over the closed segments to find the last flips
        # (an unclean start begins a round at once; log_scrub_bytes_per_second = 8 MiB/s)
        scrub_wait_s = min(300.0, _largest_replica_bytes(state) / SCRUB_BYTES_PER_S + 20)
        print(f"waiting {scrub_wait_s:.0f} s for a scrub round before reading back")
        time.sleep(scrub_wait_s)
        _wait(lambda: all(len(p["isr_nodes"]) == 3 for p in _partitions(state)), 120)
        result = _read_back(state.bootstrap, producer.acked)
        result["partitions_at_end"] = [
            {k: p[k] for k in ("topic", "partition", "leader", "leader_epoch", "isr",
                               "replica_offsets")}
            for p in status_report(ClusterState.load(state.data_dir))["partitions"]
            if p["topic"] == TOPIC]  # reloaded: restarts changed the PIDs
        result.update({
            "api": "clients.producer.Producer.send() acks=all idempotent; "
                   "clients.consumer.Consumer.poll() from offset 0",
            "input": f"topic {TOPIC}: {PARTITIONS} partitions, RF 3, min ISR 2, "
                     "256 KiB segments, 100 B values; faults " + ", ".join(faults)
                     + f"; preferred-leader check every {args.preferred_check_ms} ms",
            "seed": seed, "duration_s": round(time.monotonic() - started, 1),
            "acknowledged": len(producer.acked), "send_failures": producer.failed,
            "faults": dict(injected), "stuck_rounds": stuck, "isr_full_at_end": settled,
            "reported_by_the_cluster": _repairs(state), "machine": machine_info()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))
    if result["lost"] == 0 and result["unreadable"] == 0:
        shutil.rmtree(root, ignore_errors=True)
        return 0
    print(f"kept the cluster's data and logs in {root}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
