"""The ``cluster status`` and ``cluster health`` commands: a report, or one line, and the
health verdict's exit code (:mod:`broker.cluster.status`: 0 healthy, 1 degraded, 2 down),
or ``unknown`` (exit 3, Nagios' UNKNOWN) when there is no cluster in the data dir to
judge: no state file, or a damaged one with no cluster process running (a health check
must tell "nothing there" apart from "degraded").

Costs: what :func:`broker.cluster.status.status_report` costs.  Thread-safety: one
command per process.
"""

from __future__ import annotations

import argparse
import json

from broker.cluster.rebuild import load_state
from broker.cluster.state import ClusterError
from broker.cluster.status import UNKNOWN, Health, health_of, print_status, status_report


def _no_cluster(error: ClusterError) -> int:
    """``status`` / ``health`` where there is no cluster to judge: the verdict
    ``unknown`` (exit 3), not ``degraded``."""
    print(Health(UNKNOWN, [str(error)]).line())
    return UNKNOWN


def cmd_status(args: argparse.Namespace) -> int:
    try:
        state = load_state(args.data_dir)
    except ClusterError as error:
        return _no_cluster(error)
    report = status_report(state)
    health = health_of(report)
    if args.json:
        print(json.dumps({**report, "health": {"verdict": health.verdict,
                                               "reasons": health.reasons}}, indent=2))
    else:
        print_status(report)
    return health.exit_code


def cmd_health(args: argparse.Namespace) -> int:
    try:
        state = load_state(args.data_dir)
    except ClusterError as error:
        return _no_cluster(error)
    health = health_of(status_report(state))
    print(health.line())
    return health.exit_code
