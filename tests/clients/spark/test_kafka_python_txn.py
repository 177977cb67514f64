"""kafka-python's transactional producer drives the workload's transactional mode
(``--client kafka-python``): its errors become ours, and a faulted run on a real 3-broker
cluster (a leader and the busiest transaction coordinator SIGKILLed and restarted,
producers restarted inside transactions) verifies clean read_committed."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pyspark.sql import SparkSession

from clients.producer.idempotence import ProducerFencedError
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.spark.verify.job import run_verify
from clients.workload import kafka_python_txn
from clients.workload.kafka_python_txn import (
    CallAbandonedError,
    KafkaPythonTxnProducer,
    call_with_deadline,
    translate,
)
from clients.workload.ledger import scan_ledger
from clients.workload.run import WorkloadConfig
from clients.workload.transactional import TxnPlan, start_session
from tests.broker.cluster_harness import LocalCluster
from tests.broker.processes import ROOT
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


class _LosingKafkaProducer:
    """kafka-python's producer as the killed-coordinator bug leaves it: the first one's
    InitProducerId is lost, so its ``init_transactions`` times out, and calling it again
    would wait for the lost request (until the workload's 180 s deadline: here it fails
    the test at once); later ones initialise."""

    made: ClassVar[list[_LosingKafkaProducer]] = []

    def __init__(self, **config: object) -> None:
        self.lost, self.closed, self.inits = not self.made, False, 0
        self.made.append(self)

    def init_transactions(self) -> None:
        self.inits += 1
        assert self.inits == 1, "init_transactions retried on the producer that lost it"
        if self.lost:
            raise kafka_errors.KafkaTimeoutError("Timeout expired while initializing")

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def test_an_init_that_timed_out_is_retried_on_a_new_kafka_python_producer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Retrying ``init_transactions`` on the same kafka-python producer would wait until
    the workload's 180 s init deadline: the session is made again instead."""
    kafka = pytest.importorskip("kafka")
    monkeypatch.setattr(kafka, "KafkaProducer", _LosingKafkaProducer)
    monkeypatch.setattr(_LosingKafkaProducer, "made", [])
    plan = TxnPlan(bootstrap="x:1", topic="t", run_id="r", producer=0, count=1, options={},
                   message=lambda s: ("k", b"v"), announce_every=1, client="kafka-python")
    stop = threading.Event()
    stop.wait = lambda timeout=None: False  # type: ignore[method-assign]  # no back-off
    client = start_session(plan, stop)
    first, second = _LosingKafkaProducer.made
    assert first.closed and client._producer is second  # type: ignore[attr-defined]


class _HangingKafkaProducer:
    """A kafka-python producer whose commit's EndTxn was lost: the commit never returns."""

    def __init__(self, **config: object) -> None:
        self.release, self.aborts = threading.Event(), 0
        self.close_timeouts: list[float | None] = []

    def commit_transaction(self) -> None:
        self.release.wait()

    def abort_transaction(self) -> None:
        self.aborts += 1

    def close(self, timeout: float | None = None) -> None:
        self.close_timeouts.append(timeout)


def test_after_an_abandoned_commit_abort_fails_at_once_and_close_does_not_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = pytest.importorskip("kafka")
    monkeypatch.setattr(kafka, "KafkaProducer", _HangingKafkaProducer)
    monkeypatch.setattr(kafka_python_txn, "CALL_TIMEOUT_S", 0.05)
    client = KafkaPythonTxnProducer("x:1", transactional_id="t", transaction_timeout_ms=1)
    hanging = client._producer
    try:
        with pytest.raises(CallAbandonedError, match="commit did not finish"):
            client.commit_transaction()
        with pytest.raises(MiniKafkaError, match="commit did not finish"):
            client.abort_transaction()
        client.close(5.0)
    finally:
        hanging.release.set()
    assert hanging.aborts == 0 and hanging.close_timeouts == [0]


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
    """Through the CLI, as a user runs it; in its own process also because kafka-python
    3.0.12 leaves the socket of a failed connect (to a killed broker) open
    (kafka/net/inet.py sock_connect raises without closing it), which would fail this
    session's ResourceWarning check."""
    ledger = str(Path(cluster.data_dir) / "kp-txn-ledger.tsv")
    run = subprocess.run(
        [sys.executable, "-m", "clients.cli", "workload", "--data-dir", cluster.data_dir,
         "--topic", "kp-txn", "--messages", "2400", "--producers", "3",
         "--keys-per-producer", "6", "--rate", "300", "--transactional",
         "--restart-ratio", "0.05", "--client", "kafka-python", "--ledger", ledger,
         "--faults", "kill-leader@1s,restart@3s,kill-coordinator@5s,restart@7s"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    # each fault is printed when it happens and again in the summary
    assert len(set(re.findall(r"fault (\S+) at .*: killed broker-", run.stdout))) == 2, \
        run.stdout
    transactions = re.search(r"transactions: (.*)", run.stdout)
    assert transactions is not None, run.stdout
    events = {name: int(n) for n, name in
              (reversed(part.rsplit(" ", 1)) for part in transactions.group(1).split(", "))}
    assert events.get("commit", 0) > 0 and events.get("abort", 0) > 0, events
    assert events.get("fenced_commit_refused", 0) > 0, events
    assert "fenced_commit_succeeded" not in events, events
    report = run_verify(spark, ledger, bootstrap=cluster.bootstrap)
    assert report.ok, report.table()
    assert report.counts["txn_committed"] == scan_ledger(ledger).outcomes["commit"] \
        == events["commit"]
