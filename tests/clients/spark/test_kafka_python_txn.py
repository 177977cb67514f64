"""kafka-python's transactional producer drives the workload's transactional mode
(``--client kafka-python``): its errors become ours, and a faulted run on a real 3-broker
cluster (a leader and the busiest transaction coordinator SIGKILLed and restarted,
producers restarted inside transactions) verifies clean read_committed."""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from clients.producer.idempotence import ProducerFencedError
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.spark.verify.job import run_verify
from clients.workload.faults import parse_schedule
from clients.workload.kafka_python_txn import call_with_deadline, translate
from clients.workload.run import WorkloadConfig, run_workload
from tests.broker.cluster_harness import LocalCluster
from tests.clients.spark.test_end_to_end import LauncherCluster

kafka_errors = pytest.importorskip("kafka.errors")


@pytest.mark.parametrize(("error", "expected"), [
    (kafka_errors.ProducerFencedError(), ProducerFencedError),
    (kafka_errors.InvalidProducerEpochError(), ProducerFencedError),
    (kafka_errors.KafkaTimeoutError("slow"), RequestTimedOutError),
    (kafka_errors.IllegalStateError("no"), MiniKafkaError),
])
def test_kafka_python_errors_become_ours(error: Exception,
                                          expected: type[MiniKafkaError]) -> None:
    translated = translate(error)
    assert type(translated) is expected and type(error).__name__ in str(translated)


def test_a_call_past_its_deadline_fails_and_its_error_is_translated() -> None:
    release = threading.Event()
    try:
        with pytest.raises(MiniKafkaError, match="commit did not finish"):
            call_with_deadline(release.wait, 0.05, "commit")
    finally:
        release.set()

    def fenced() -> None:
        raise kafka_errors.ProducerFencedError()

    with pytest.raises(ProducerFencedError):
        call_with_deadline(fenced, 5.0, "abort")


def test_the_pipeline_is_not_offered_with_kafka_python() -> None:
    with pytest.raises(ValueError, match="pipeline runs with"):
        WorkloadConfig(bootstrap="x:1", topic="t", ledger_path="l", transactional=True,
                       client="kafka-python", pipeline_workers=1).check()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LauncherCluster(tmp_path_factory.mktemp("kptxn"), 3,
                         {"replica_lag_time_max_ms": 1500}) as c:
        yield c


@pytest.mark.spark
@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_faulted_kafka_python_transactional_run_verifies_clean(
        cluster: LocalCluster, spark: SparkSession) -> None:
    config = WorkloadConfig(
        bootstrap=cluster.bootstrap, topic="kp-txn", data_dir=cluster.data_dir,
        ledger_path=str(Path(cluster.data_dir) / "kp-txn-ledger.tsv"), messages=2_400,
        producers=3, keys_per_producer=6, rate=300, transactional=True, restart_ratio=0.05,
        client="kafka-python",
        faults=parse_schedule("kill-leader@1s,restart@3s,kill-coordinator@5s,restart@7s"))
    result = run_workload(config)
    with warnings.catch_warnings():
        # kafka-python 3.0.12 leaves the socket of a failed connect (to a killed broker)
        # open (kafka/net/inet.py sock_connect): collected here, not failing the session
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    outcomes = [f.outcome for f in result.faults]
    assert sum(o.startswith("killed broker-") for o in outcomes) == 2, outcomes
    events = result.transactions
    assert events["commit"] > 0 and events["abort"] > 0, events
    assert events["fenced_commit_refused"] > 0 and events["fenced_commit_succeeded"] == 0, \
        events
    report = run_verify(spark, config.ledger_path, bootstrap=cluster.bootstrap)
    assert report.ok, report.table()
    assert report.counts["txn_committed"] == events["commit"]
    assert report.counts["acked"] == result.acked > 0
