"""``minikafka demo``: cluster, workload with faults, Spark verification, stop.

The README's main command runs this.  It starts a real local cluster (one controller
and three brokers, ``minikafka cluster start --base-port 0``) in a temporary data
directory; runs the verification workload (:mod:`clients.workload.run`: 4 idempotent
acks=all producers, every acknowledgment in a ledger) on a topic with replication
factor 3 and min ISR 2 while faults are injected on a schedule (by default the leader
of partition 0 is SIGKILLed at 2 s and restarted at 4 s, and the controller restarted
at 6 s); then a transactional run (:mod:`clients.workload.transactional`, 3,000 records
in transactions committed, aborted and restarted at random, the busiest transaction
coordinator killed at 1 s and restarted at 3 s; ``--txn-messages 0`` skips it) with,
meanwhile, a consume-transform-produce pipeline (:mod:`clients.workload.pipeline`: 2
workers copy f(records) to ``demo-transactional-out`` in transactions that commit their
consumed offsets, some aborted, some killed and restarted; ``--pipeline-workers 0``
skips it); prints
``cluster status``; runs the Spark verification job (:mod:`clients.spark.verify.job`,
``local[*]``, one session for both runs) that reads the topic through the ``minikafka``
data source and reports lost, duplicated, reordered and phantom records (and, for the
transactional run, read_committed: aborted reads, torn transactions, and the pipeline's
output = f(input) exactly once); and stops the
cluster, always, also on failure or Ctrl-C.  Exit status 0 only when every
verification is clean.  Spark needs Java: without it the demo stops before starting
anything and says how to install it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.protocol.errors import MiniKafkaError

if TYPE_CHECKING:
    from clients.workload.run import WorkloadConfig

DEFAULT_FAULTS = "kill-leader@2s,restart@4s,restart-controller@6s"
DEFAULT_TXN_FAULTS = "kill-coordinator@1s,restart@3s"


def add_parser(sub: Any) -> None:
    demo = sub.add_parser("demo", help="cluster + workload with faults + Spark verify + stop",
                          description=__doc__.split("\n")[0])
    demo.add_argument("--messages", type=int, default=20_000)
    demo.add_argument("--rate", type=float, default=2_000.0,
                      help="messages per second (the faults happen while they flow)")
    demo.add_argument("--partitions", type=int, default=3)
    demo.add_argument("--faults", default=DEFAULT_FAULTS, help="a fault schedule ('' for none)")
    demo.add_argument("--txn-messages", type=int, default=3_000,
                      help="records of the transactional run (0: no transactional run)")
    demo.add_argument("--pipeline-workers", type=int, default=2,
                      help="consume-transform-produce workers over the transactional run "
                           "(0: no pipeline)")
    demo.add_argument("--txn-faults", default=DEFAULT_TXN_FAULTS,
                      help="the transactional run's fault schedule ('' for none)")
    demo.add_argument("--master", default="local[*]", help="Spark master for the verify job")
    demo.add_argument("--report", default=None, metavar="PATH", help="write the JSON report")
    demo.add_argument("--data-dir", default=None, help="default: a temporary directory")
    demo.add_argument("--controllers", type=int, default=1, choices=(1, 3, 5),
                      help="controller quorum voters (cluster start --controllers); with 3, "
                      "a schedule may kill the active one: kill-active-controller@6s,"
                      "restart@8s (docs/quorum_brokers.md)")
    demo.set_defaults(func=run_demo)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MiniKafkaError(f"broker exited with status {proc.returncode} during startup")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise MiniKafkaError(f"broker did not listen on port {port} within {timeout_s:.0f} s")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def cluster_command(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "broker.cluster", *args], check=False)
    if result.returncode != 0:
        raise MiniKafkaError(f"'minikafka cluster {args[0]}' failed ({result.returncode})")


@contextmanager
def running_cluster(data_dir: str, brokers: int = 3, controllers: int = 1) -> Iterator[str]:
    try:
        cluster_command("start", "--data-dir", data_dir, "--brokers", str(brokers),
                        "--base-port", "0", "--controllers", str(controllers))
        # the launcher's state file (broker/cluster/state.py) names the ports it chose
        state = json.loads((Path(data_dir) / "cluster.json").read_text())
        yield ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"].values())
    finally:
        cluster_command("stop", "--data-dir", data_dir)


@contextmanager
def running_broker(data_dir: str, port: int, extra: list[str] | None = None,
                   quiet: bool = True) -> Iterator[subprocess.Popen[bytes]]:
    cmd = [sys.executable, "-m", "broker", "start", "--port", str(port), "--data-dir", data_dir,
           *(extra or [])]
    out = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(cmd, stdout=out, stderr=out)
    try:
        wait_for_port(port, proc, 30.0)
        yield proc
    finally:
        stop_process(proc)


def spark_missing() -> str | None:
    """Why the verify job cannot run here (with how to fix it), or None."""
    from clients.spark.verify.session import JAVA_HELP, java_available

    try:
        import pyspark  # noqa: F401
    except ImportError:
        return ("the verification job needs PySpark: python3 -m pip install -e '.[spark]' "
                "(pyspark, pyarrow, pandas)")
    return None if java_available() else JAVA_HELP


def _txn_report_path(report: str) -> str:
    path = Path(report)
    return str(path.with_name(f"{path.stem}-transactional{path.suffix or '.json'}"))


def _transactional_run(args: argparse.Namespace, bootstrap: str, data_dir: str) -> str:
    """The demo's transactional workload; its ledger's path."""
    from clients.workload.faults import parse_schedule
    from clients.workload.ledger import default_ledger_path
    from clients.workload.run import WorkloadConfig, new_run_id, run_workload

    run_id = new_run_id()
    config = WorkloadConfig(
        bootstrap=bootstrap, topic="demo-transactional", run_id=run_id, data_dir=data_dir,
        ledger_path=str(default_ledger_path(data_dir, run_id)), messages=args.txn_messages,
        producers=3, keys_per_producer=2 * args.partitions, rate=1_000,
        partitions=args.partitions, transactional=True, restart_ratio=0.05,
        faults=parse_schedule(args.txn_faults) if args.txn_faults else [],
        pipeline_workers=args.pipeline_workers, pipeline_kill_ratio=0.05)
    print(f"transactional run {run_id}: {config.messages} records from {config.producers} "
          f"transactional producers (commits, aborts, fenced restarts) at about "
          f"{config.rate:.0f}/s" + (f"; faults {args.txn_faults}" if args.txn_faults else "")
          + (f"; a pipeline of {config.pipeline_workers} workers copies f(records) to "
             f"{config.pipeline_sink!r} exactly once" if config.pipeline_workers else ""))
    _create_after_heal(config)
    result = run_workload(config)
    print("\n".join(result.summary_lines()))
    return config.ledger_path


def _create_after_heal(config: WorkloadConfig, timeout_s: float = 60.0) -> None:
    """Create the transactional run's topic once the first run's restarted brokers are
    back: a broker restarted by the heal is fenced until its first heartbeat, and the
    controller refuses a replication factor above the unfenced brokers
    (INVALID_REPLICATION_FACTOR).  The demo's cluster has 3 brokers, so that answer means
    "not yet" here; it is retried every 0.2 s until ``timeout_s``, then raised."""
    from clients.protocol.errors import ErrorCode
    from clients.workload.run import ensure_topic

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ensure_topic(config, print)
            return
        except MiniKafkaError as e:
            if e.code != ErrorCode.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def run_demo(args: argparse.Namespace) -> int:
    from clients.spark.verify.job import verify_ledgers, write_report
    from clients.workload.faults import parse_schedule
    from clients.workload.ledger import default_ledger_path
    from clients.workload.run import WorkloadConfig, new_run_id, run_workload

    problem = spark_missing()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    faults = parse_schedule(args.faults) if args.faults else []
    owned_dir = args.data_dir is None
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="minikafka-demo-")
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    run_id = new_run_id()
    started = time.monotonic()
    try:
        print(f"starting a local cluster: {args.controllers} controller"
              f"{'s' if args.controllers > 1 else ''} + 3 brokers (data in {data_dir})")
        with running_cluster(data_dir, controllers=args.controllers) as bootstrap:
            config = WorkloadConfig(
                bootstrap=bootstrap, topic="demo", run_id=run_id, data_dir=data_dir,
                ledger_path=str(default_ledger_path(data_dir, run_id)),
                messages=args.messages, rate=args.rate, partitions=args.partitions,
                faults=faults)
            print(f"workload run {run_id}: {config.messages} messages from "
                  f"{config.producers} idempotent producers (acks=all) at about "
                  f"{config.rate:.0f}/s" + (f"; faults {args.faults}" if faults else ""))
            result = run_workload(config)
            print("\n".join(result.summary_lines()))
            ledgers = [config.ledger_path]
            if args.txn_messages > 0:
                ledgers.append(_transactional_run(args, bootstrap, data_dir))
            cluster_command("status", "--data-dir", data_dir)
            spark_log = str(Path(data_dir) / "spark.log")
            print(f"verifying with Spark ({args.master}; its log: {spark_log}) ...")
            t0 = time.monotonic()
            reports = verify_ledgers(ledgers, bootstrap=bootstrap, master=args.master,
                                     spark_log=spark_log)
            for report in reports:
                print(report.table())
            if args.report:
                write_report(reports[0], args.report)
                if len(reports) > 1:
                    write_report(reports[1], _txn_report_path(args.report))
            print(f"verification took {time.monotonic() - t0:.1f} s"
                  + (f"; report written to {args.report}" if args.report else ""))
        print(f"demo done in {time.monotonic() - started:.1f} s")
        return 0 if all(report.ok for report in reports) else 1
    finally:
        if owned_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
