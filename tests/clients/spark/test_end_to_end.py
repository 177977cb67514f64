"""End to end on a real 3-broker cluster: workload (with faults) -> ledger -> Spark verify.

- idempotent producers while leaders are SIGKILLed and restarted and the controller is
  restarted: the topic verifies clean (0 lost, 0 duplicated, 0 reordered, 0 phantom);
- a transactional run (commits, aborts, fenced restarts) with a leader and the busiest
  transaction coordinator killed verifies clean read_committed, and the same log read
  read_uncommitted shows its aborted records as aborted reads;
- the verifier can fail: a Parquet copy of that topic with one acknowledged record
  removed (test-only tampering of a copy; the cluster is untouched) shows it as lost, and
  producers without idempotence whose responses are dropped (forced retries) show
  duplicates.

One cluster for the module; the faulted workload runs once and two tests read its result.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clients.spark.verify.job import (
    VIOLATIONS,
    ledger_frames,
    read_topic,
    run_verify,
    verify_frames,
)
from clients.spark.verify.transactions import txn_frame
from clients.workload.faults import parse_schedule
from clients.workload.ledger import Ack, read_ledger, scan_ledger
from clients.workload.run import WorkloadConfig, WorkloadResult, run_workload
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess, pytest.mark.slow]

# A restart waits until the broker is registered again (a few seconds on a loaded
# machine) and events run one at a time, so they are spread out; the messages are paced
# to flow for ~14 s, past the last fault.
FAULTS = "kill-leader@1s,restart@2s,kill-leader:1@6s,restart@7s,restart-controller@10s"


class LauncherCluster(LocalCluster):
    """A LocalCluster whose commands run as ``python -m broker.cluster`` processes, as a
    user's would: the brokers are then not children of this test process, so the
    workload's fault injector (another launcher process) can kill and reap them."""

    def _run(self, *args: str) -> None:
        result = subprocess.run([sys.executable, "-m", "broker.cluster", *args, "--data-dir",
                                 self.data_dir], capture_output=True, text=True, timeout=300,
                                cwd=ROOT, check=False)
        assert result.returncode == 0, f"cluster {' '.join(args)}: {result.stderr}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LauncherCluster(tmp_path_factory.mktemp("e2e"), 3,
                         {"replica_lag_time_max_ms": 1500}) as c:
        yield c


@pytest.fixture(scope="module")
def faulted_run(cluster: LocalCluster) -> WorkloadResult:
    config = WorkloadConfig(
        bootstrap=cluster.bootstrap, topic="faulted", data_dir=cluster.data_dir,
        ledger_path=str(Path(cluster.data_dir) / "faulted-ledger.tsv"), messages=14_000,
        producers=3, rate=1_000, faults=parse_schedule(FAULTS))
    result = run_workload(config)
    outcomes = [f.outcome for f in result.faults]
    assert not any(o.startswith(("skipped", "failed")) for o in outcomes), outcomes
    assert sum(o.startswith("killed broker-") for o in outcomes) == 2, outcomes
    assert result.acked > 0 and result.sent == config.messages
    return result


def test_leader_kills_and_a_controller_restart_verify_clean(
        spark: SparkSession, cluster: LocalCluster, faulted_run: WorkloadResult) -> None:
    report = run_verify(spark, faulted_run.ledger_path, bootstrap=cluster.bootstrap)
    assert {name: report.counts[name] for name in VIOLATIONS} == dict.fromkeys(VIOLATIONS, 0)
    assert report.ok, report.table()
    assert report.counts["acked"] == faulted_run.acked
    assert report.counts["present"] >= faulted_run.acked


def test_an_acknowledged_record_removed_from_a_copy_shows_as_lost(
        spark: SparkSession, cluster: LocalCluster, faulted_run: WorkloadResult,
        tmp_path: Path) -> None:
    victim = next(r for r in read_ledger(faulted_run.ledger_path) if isinstance(r, Ack))
    copy = str(tmp_path / "tampered-copy")
    (read_topic(spark, cluster.bootstrap, faulted_run.topic)
     .where(~((F.col("partition") == victim.partition) & (F.col("offset") == victim.offset)))
     .write.parquet(copy))
    report = run_verify(spark, faulted_run.ledger_path, sink=copy)
    assert report.counts["lost"] == 1 and report.violations == 1
    assert report.examples["lost"] == [{"producer": victim.producer, "seq": victim.sequence,
                                        "key": victim.key, "partition": victim.partition,
                                        "offset": victim.offset}]


def test_forced_retries_without_idempotence_show_duplicates(
        spark: SparkSession, cluster: LocalCluster) -> None:
    config = WorkloadConfig(
        bootstrap=cluster.bootstrap, topic="retried",
        ledger_path=str(Path(cluster.data_dir) / "retried-ledger.tsv"), messages=3_000,
        producers=2, idempotence=False, drop_response_ratio=0.2, drop_seed=11,
        rate=3_000)  # paced over ~1 s: many produce responses for the ratio to drop
    result = run_workload(config)
    assert result.acked == config.messages
    report = run_verify(spark, config.ledger_path, bootstrap=cluster.bootstrap)
    assert report.counts["duplicated"] > 0 and report.counts["duplicate_copies"] > 0
    assert report.counts["lost"] == 0 and report.counts["phantom"] == 0
    assert not report.ok


def test_a_transactional_run_with_a_leader_and_a_coordinator_killed_verifies_clean(
        cluster: LocalCluster, spark: SparkSession) -> None:
    config = WorkloadConfig(
        bootstrap=cluster.bootstrap, topic="transactional", data_dir=cluster.data_dir,
        ledger_path=str(Path(cluster.data_dir) / "transactional-ledger.tsv"), messages=3_000,
        producers=3, keys_per_producer=6, rate=300, transactional=True, restart_ratio=0.05,
        faults=parse_schedule("kill-leader@1s,restart@3s,kill-coordinator@5s,restart@7s"))
    result = run_workload(config)
    outcomes = [f.outcome for f in result.faults]
    assert sum(o.startswith("killed broker-") for o in outcomes) == 2, outcomes
    assert result.transactions["commit"] > 0 and result.transactions["abort"] > 0
    assert result.transactions["fenced_commit_refused"] > 0, result.transactions
    assert result.transactions["fenced_commit_succeeded"] == 0
    report = run_verify(spark, config.ledger_path, bootstrap=cluster.bootstrap)
    assert report.ok, report.table()
    assert "read_committed" in report.source
    assert report.counts["txn_committed"] == result.transactions["commit"]
    assert report.counts["acked"] == result.acked > 0
    # the aborted records are in the log: read_uncommitted (the Spark source) shows them
    summary = scan_ledger(config.ledger_path)
    acks, sent = ledger_frames(spark, config.ledger_path, summary)
    uncommitted, _ = verify_frames(read_topic(spark, cluster.bootstrap, config.topic), acks,
                                   sent, config.run_id,
                                   txns=txn_frame(spark, config.ledger_path))
    assert uncommitted["aborted_read"] > 0, uncommitted
