"""The consume-transform-produce pipeline and the whole-cluster crash on a real 3-broker
cluster, checked by the Spark verify job:

- our client: transactional producers write A while two pipeline workers copy f(A) to B
  in transactions with their consumed offsets; workers are killed inside transactions
  (their restarted successor fences them) and the busiest transaction coordinator is
  SIGKILLed and restarted: A verifies clean read_committed and B = f(A) exactly once;
- confluent-kafka's producers and pipeline (Consumer + Producer,
  ``send_offsets_to_transaction`` with the consumer's group metadata) ride through a
  whole-cluster crash (every broker and the controller SIGKILLed at once, then
  restarted): clean too.

One cluster for the module (the launcher's processes, as in test_end_to_end).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from clients.spark.verify.job import run_verify
from clients.spark.verify.pipeline import PIPELINE_VIOLATIONS
from clients.workload.faults import parse_schedule
from clients.workload.ledger import scan_ledger
from clients.workload.run import WorkloadConfig, run_workload
from tests.broker.cluster_harness import LocalCluster
from tests.clients.spark.test_end_to_end import LauncherCluster

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LauncherCluster(tmp_path_factory.mktemp("pipeline"), 3,
                         {"replica_lag_time_max_ms": 1500}) as c:
        yield c


def pipeline_config(cluster: LocalCluster, topic: str, faults: str, **more: object
                    ) -> WorkloadConfig:
    return WorkloadConfig(
        bootstrap=cluster.bootstrap, topic=topic, data_dir=cluster.data_dir,
        ledger_path=str(Path(cluster.data_dir) / f"{topic}-ledger.tsv"), messages=1_500,
        producers=2, keys_per_producer=6, rate=300, transactional=True, restart_ratio=0.05,
        pipeline_workers=2, faults=parse_schedule(faults), **more)  # type: ignore[arg-type]


def assert_exactly_once(spark: SparkSession, cluster: LocalCluster,
                        config: WorkloadConfig) -> dict[str, int]:
    report = run_verify(spark, config.ledger_path, bootstrap=cluster.bootstrap)
    assert report.ok, report.table()
    counts = report.counts
    assert {name: counts[name] for name in PIPELINE_VIOLATIONS} == dict.fromkeys(
        PIPELINE_VIOLATIONS, 0)
    assert counts["pipeline_expected"] == counts["pipeline_records"] == counts["present"] > 0
    assert counts["pipeline_txn_committed"] == scan_ledger(
        config.ledger_path).pipeline_outcomes["commit"]
    return counts


def test_a_pipeline_with_workers_and_a_coordinator_killed_is_exactly_once(
        cluster: LocalCluster, spark: SparkSession) -> None:
    config = pipeline_config(cluster, "pipe-in", "kill-coordinator@1s,restart@2s",
                             run_id="pipekill", pipeline_kill_ratio=0.15,
                             pipeline_abort_ratio=0.2)
    result = run_workload(config)
    outcomes = [f.outcome for f in result.faults]
    assert outcomes[0].startswith("killed broker-"), outcomes
    assert outcomes[1].startswith("restarted broker-"), outcomes
    assert result.pipeline_caught_up, result.summary_lines()
    events = result.transactions
    assert events["pipeline_kill"] > 0 and events["pipeline_abort"] > 0, events
    assert events["pipeline_fenced_commit_refused"] == events["pipeline_kill"], events
    assert events["pipeline_fenced_commit_succeeded"] == 0
    assert_exactly_once(spark, cluster, config)


def test_a_whole_cluster_crash_under_confluent_kafkas_pipeline_verifies_clean(
        cluster: LocalCluster, spark: SparkSession) -> None:
    pytest.importorskip("confluent_kafka")
    config = pipeline_config(cluster, "crash-in", "crash-cluster@2s", client="confluent")
    result = run_workload(config)
    crash = result.faults[0]
    assert crash.outcome.startswith("killed controller, 0, 1, 2; restarted controller, 0, "
                                    "1, 2"), crash
    assert result.pipeline_caught_up, result.summary_lines()
    assert result.transactions["commit"] > 0 and result.transactions["pipeline_commit"] > 0
    assert_exactly_once(spark, cluster, config)
