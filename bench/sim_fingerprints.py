"""Fingerprints of simulation runs: did a change leave every seed's run as it was?

    python3 -m bench.sim_fingerprints /tmp/before.json no_loss:0-29:2500 lossy:0-29:2500
    (change the code)
    python3 -m bench.sim_fingerprints /tmp/after.json no_loss:0-29:2500 lossy:0-29:2500 \\
        --compare /tmp/before.json

Each ``MODE:FIRST-LAST:STEPS`` runs those seeds of a :data:`bench.sim.MODES` mode (as
``bench.sim.run_seeds`` runs them) and keeps per seed: the steps run, the stats, a sha256
of every event the cluster recorded (``SimCluster.record``; the controller's random topic
UUID blanked, the one thing that differs between two runs of a seed), a hash of the final
RNG state, every replica's LEO and HW, and the failure, if any.  ``--compare`` names the
runs whose fingerprint differs from an earlier file's (exit status 1), so a speed-up can
show that it changed nothing a seed does (bench/results/rooms_before_after.json,
``simspeed_w35`` and ``simspeed_w36``).

Costs: the runs themselves plus one sha256 update per event.  A process of its own: it
wraps ``SimCluster.record`` for its runs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from bench.sim import MODES, sim_config
from tests.sim.cluster import SimCluster
from tests.sim.config import SimFailure

_UUID = re.compile(r"""topic_uuid=b(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")


class FingerprintedCluster(SimCluster):
    """A cluster that hashes every event it records."""

    def __init__(self, seed: int, config: Any) -> None:
        self.events = hashlib.sha256()
        super().__init__(seed, config)

    def record(self, event: str) -> None:
        self.events.update(_UUID.sub("topic_uuid=?", event).encode() + b"\n")
        super().record(event)


def fingerprint(mode: str, seed: int, steps: int) -> dict[str, Any]:
    """One run's fingerprint (see the module docstring)."""
    with contextlib.ExitStack() as stack:
        cluster = FingerprintedCluster(seed, sim_config(MODES[mode], stack))
        failure = None
        try:
            cluster.run(steps)
        except SimFailure as exc:
            failure = str(exc).splitlines()[0]
        offsets = {f"b{b.id}p{pid}": [p.log_end_offset, p.high_watermark]
                   for b in cluster.brokers.values() for pid, p in sorted(b.partitions.items())}
        return {"steps": cluster.steps, "stats": dict(sorted(cluster.stats.items())),
                "events": cluster.events.hexdigest(),
                "rng": hashlib.sha256(repr(cluster.rng.getstate()).encode()).hexdigest()[:16],
                "offsets": offsets, "fail": failure}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the JSON to write")
    ap.add_argument("runs", nargs="+", metavar="MODE:FIRST-LAST:STEPS")
    ap.add_argument("--compare", type=Path, help="an earlier output to compare with")
    args = ap.parse_args(argv)
    for name, level in (("broker", logging.ERROR), ("storage", logging.CRITICAL),
                        ("replication", logging.ERROR)):
        logging.getLogger(name).setLevel(level)  # as bench.sim.run_seeds
    result: dict[str, Any] = {}
    for spec in args.runs:
        mode, seeds, steps = spec.split(":")
        first, last = (int(s) for s in seeds.split("-"))
        for seed in range(first, last + 1):
            result[f"{mode}/{seed}"] = fingerprint(mode, seed, int(steps))
    args.out.write_text(json.dumps(result, indent=0, sort_keys=True) + "\n")
    print(f"{len(result)} runs -> {args.out}")
    if args.compare is None:
        return 0
    before = json.loads(args.compare.read_text())
    differ = [k for k, v in result.items() if before.get(k) != v]
    print(f"{len(result)} runs compared: "
          + (f"{len(differ)} differ: {', '.join(differ[:20])}" if differ else "identical"))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
