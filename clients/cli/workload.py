"""``minikafka workload`` and ``minikafka verify``: write a ledgered workload, verify it.

::

    minikafka workload --data-dir ./data --topic verify --messages 20000 --rate 2000 \\
        --faults kill-leader@2s,restart@4s,restart-controller@6s
    minikafka verify --data-dir ./data --ledger ./data/ledger-<run>.tsv --report report.json
    minikafka workload --data-dir ./data --topic txn --transactional --keys-per-producer 6 \
        --faults kill-leader@2s,restart@4s,kill-coordinator@6s,restart@8s \
        [--client confluent|kafka-python]
    minikafka workload --data-dir ./data --topic txn --transactional --pipeline-workers 2 \
        --faults crash-cluster@3s,kill-coordinator@12s,restart@14s

``--data-dir`` names a local cluster (``minikafka cluster start --data-dir``): its broker
addresses come from the cluster's state file, and faults are injected through the
launcher.  ``--bootstrap-server`` (alias ``--bootstrap``) reaches any cluster instead
(no faults then).  ``--transactional`` sends in transactions
(:mod:`clients.workload.transactional`), verified read_committed; ``--pipeline-workers K``
adds K consume-transform-produce workers copying f(topic) to ``--pipeline-topic``
(default ``<topic>-out``) exactly once (:mod:`clients.workload.pipeline`), which verify
then checks too.  ``--random-faults`` on a transactional run draws coordinator kills and
whole-cluster crashes as well.  ``verify`` exits 0 when
the run is clean, 1 on any violation or error.
See :mod:`clients.workload.run`, :mod:`clients.spark.verify.job` and docs/verification.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from clients.cli.common import DEFAULT_BOOTSTRAP, CliError


def add_parsers(sub: Any) -> None:
    workload = sub.add_parser("workload", help="produce a ledgered workload, with faults",
                              description=__doc__.split("\n")[0])
    _target_options(workload)
    workload.add_argument("--topic", default="verify", help="created if absent")
    workload.add_argument("--partitions", type=int, default=3)
    workload.add_argument("--replication-factor", type=int, default=3)
    workload.add_argument("--min-insync-replicas", type=int, default=2)
    workload.add_argument("--messages", type=int, default=10_000)
    workload.add_argument("--producers", type=int, default=4)
    workload.add_argument("--keys-per-producer", type=int, default=3)
    workload.add_argument("--rate", type=float, default=0.0,
                          help="messages per second over all producers (0: unpaced)")
    workload.add_argument("--value-bytes", type=int, default=100)
    workload.add_argument("--no-idempotence", action="store_true",
                          help="the old producer: retries may duplicate")
    workload.add_argument("--drop-response-ratio", type=float, default=0.0,
                          help="test hook: drop this fraction of produce responses (retries)")
    workload.add_argument("--drop-seed", type=int, default=7)
    workload.add_argument("--transactional", action="store_true",
                          help="send in transactions (random commits, aborts, restarts)")
    workload.add_argument("--max-txn-records", type=int, default=20,
                          help="transactions hold 1..this many records")
    workload.add_argument("--abort-ratio", type=float, default=0.2,
                          help="fraction of transactions aborted on purpose")
    workload.add_argument("--restart-ratio", type=float, default=0.02,
                          help="fraction of transactions whose producer is restarted "
                               "(fenced) inside them")
    workload.add_argument("--transaction-timeout-ms", type=int, default=20_000)
    workload.add_argument("--client", choices=("minikafka", "confluent", "kafka-python"),
                          default="minikafka", help="the transactional producer: ours, "
                          "confluent-kafka's or kafka-python's (no pipeline)")
    workload.add_argument("--pipeline-workers", type=int, default=0, metavar="K",
                          help="transactional: K consume-transform-produce workers copy "
                               "f(topic) to --pipeline-topic exactly once (0: none)")
    workload.add_argument("--pipeline-topic", default="",
                          help="the pipeline's output topic (default: <topic>-out)")
    workload.add_argument("--pipeline-abort-ratio", type=float, default=0.1,
                          help="fraction of pipeline transactions aborted on purpose")
    workload.add_argument("--pipeline-kill-ratio", type=float, default=0.02,
                          help="fraction of pipeline transactions whose worker is killed "
                               "inside them (and restarted: the old one fenced)")
    faults = workload.add_mutually_exclusive_group()
    faults.add_argument("--faults", default=None, metavar="SCHEDULE",
                        help="e.g. kill-leader@2s,restart@4s,restart-controller@6s,"
                             "pause:2@8s,resume:2@9s")
    faults.add_argument("--random-faults", type=int, default=None, metavar="SEED",
                        help="a random schedule drawn from SEED")
    workload.add_argument("--fault-window-s", type=float, default=None,
                          help="random faults within this many seconds (default: "
                               "messages/rate, or 10)")
    workload.add_argument("--ledger", default=None,
                          help="default: ledger-<run>.tsv in --data-dir or the current dir")
    workload.add_argument("--run-id", default=None)
    workload.set_defaults(func=cmd_workload)

    verify = sub.add_parser("verify", help="Spark job: check a topic against a ledger",
                            description="Spark job: check a topic (or a Parquet sink) "
                                        "against a workload ledger")
    _target_options(verify)
    verify.add_argument("--ledger", required=True)
    verify.add_argument("--sink", default=None,
                        help="verify this Parquet sink directory instead of the topic")
    verify.add_argument("--master", default="local[*]", help="Spark master URL")
    verify.add_argument("--report", default=None, metavar="PATH", help="write a JSON report")
    verify.add_argument("--examples", type=int, default=5,
                        help="rows shown per violation kind")
    verify.set_defaults(func=cmd_verify)


def _target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap_server",
                        default=None, metavar="HOST:PORT",
                        help=f"default: from --data-dir, else {DEFAULT_BOOTSTRAP}")
    parser.add_argument("--data-dir", default=None, help="a local cluster's directory")


def _bootstrap(args: argparse.Namespace) -> str:
    from clients.workload.faults import bootstrap_from_data_dir

    if args.bootstrap_server:
        return str(args.bootstrap_server)
    return bootstrap_from_data_dir(args.data_dir) if args.data_dir else DEFAULT_BOOTSTRAP


def workload_config(args: argparse.Namespace) -> Any:
    from clients.workload.faults import parse_schedule, random_schedule
    from clients.workload.ledger import default_ledger_path
    from clients.workload.run import WorkloadConfig, new_run_id

    run_id = args.run_id or new_run_id()
    events = []
    if args.faults or args.random_faults is not None:
        if not args.data_dir:
            raise CliError("fault injection needs --data-dir (the cluster's directory)")
        if args.faults:
            events = parse_schedule(args.faults)
        else:
            window_s = args.fault_window_s or (args.messages / args.rate if args.rate else 10.0)
            events = random_schedule(args.random_faults, int(window_s * 1000),
                                     transactional=args.transactional)
    ledger = args.ledger or str(default_ledger_path(args.data_dir or ".", run_id))
    config = WorkloadConfig(
        bootstrap=_bootstrap(args), topic=args.topic, ledger_path=ledger, run_id=run_id,
        messages=args.messages, producers=args.producers,
        keys_per_producer=args.keys_per_producer, rate=args.rate, value_bytes=args.value_bytes,
        partitions=args.partitions, replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas, idempotence=not args.no_idempotence,
        drop_response_ratio=args.drop_response_ratio, drop_seed=args.drop_seed,
        data_dir=args.data_dir, faults=events, transactional=args.transactional,
        max_txn_records=args.max_txn_records, abort_ratio=args.abort_ratio,
        restart_ratio=args.restart_ratio, transaction_timeout_ms=args.transaction_timeout_ms,
        client=args.client, pipeline_workers=args.pipeline_workers,
        pipeline_topic=args.pipeline_topic, pipeline_abort_ratio=args.pipeline_abort_ratio,
        pipeline_kill_ratio=args.pipeline_kill_ratio)
    config.check()
    return config


def cmd_workload(args: argparse.Namespace) -> int:
    from clients.workload.faults import format_schedule
    from clients.workload.run import run_workload

    config = workload_config(args)
    print(f"workload run {config.run_id}: {config.messages} messages, {config.producers} "
          f"producers, idempotence {'on' if config.idempotence else 'off'}"
          + (f", transactional (<= {config.max_txn_records} records, abort ratio "
             f"{config.abort_ratio}, restart ratio {config.restart_ratio})"
             if config.transactional else "")
          + (f", client {config.client}" if config.client != "minikafka" else "")
          + (f", pipeline of {config.pipeline_workers} workers to {config.pipeline_sink!r}"
             if config.pipeline_workers else "")
          + (f", faults {format_schedule(config.faults)}" if config.faults else ""))
    result = run_workload(config)
    print("\n".join(result.summary_lines()))
    target = f"--data-dir {args.data_dir}" if args.data_dir else f"--bootstrap {config.bootstrap}"
    print(f"verify with: minikafka verify {target} --ledger {config.ledger_path}")
    return 0 if result.acked > 0 else 1


def cmd_verify(args: argparse.Namespace) -> int:
    from clients.spark.verify.job import verify_job
    from clients.spark.verify.session import VerifyError

    if args.sink and (args.bootstrap_server or args.data_dir):
        raise CliError("--sink reads a Parquet directory: give no --bootstrap/--data-dir")
    try:
        report = verify_job(args.ledger, bootstrap=None if args.sink else _bootstrap(args),
                            sink=args.sink, master=args.master, examples=args.examples,
                            report_path=args.report)
    except VerifyError as exc:
        raise CliError(str(exc)) from None
    sys.stdout.write(report.table() + "\n")
    if args.report:
        print(f"report written to {args.report}")
    return 0 if report.ok else 1
