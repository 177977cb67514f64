"""``minikafka log-dirs``: what each broker stores where (Kafka's ``kafka-log-dirs.sh``).

``log-dirs [--describe] [--broker-list 1,2] [--topic-list a,b]`` asks each broker
(DescribeLogDirs; default every broker) and prints Kafka's two status lines and its
JSON::

    {"version": 1, "brokers": [{"broker": 1, "logDirs": [{"logDir": "/data/b1",
      "error": null, "partitions": [{"partition": "t-0", "size": 1234,
      "offsetLag": 0, "isFuture": false}]}]}]}

A broker that fails to answer is listed with its error in place of ``logDirs``
(``"error": "..."``) and makes the exit status 1.

Costs: Metadata plus one round trip per broker.  Thread safety: one thread.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from clients.cli.common import CliError
from clients.cli.connect.settings import admin_settings
from clients.protocol.errors import ErrorCode, MiniKafkaError

__all__ = ["add_parser"]


def _ids(text: str | None, what: str) -> list[str] | None:
    if text is None:
        return None
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise CliError(f"{what}: empty list")
    return items


def cmd_log_dirs(args: argparse.Namespace) -> int:
    from clients.admin import Admin

    brokers_text = _ids(args.broker_list, "--broker-list")
    try:
        brokers = None if brokers_text is None else [int(b) for b in brokers_text]
    except ValueError:
        raise CliError(f"--broker-list: {args.broker_list!r} is not a list of ids") from None
    topics = _ids(args.topic_list, "--topic-list")
    print("Querying brokers for log directories information")
    with Admin(args.bootstrap_server, **admin_settings(args)) as admin:
        found = admin.describe_log_dirs(brokers, topics, raise_on_error=False)
    failed = sorted(b for b, d in found.items() if isinstance(d, MiniKafkaError))
    print("Received log directory information from brokers "
          + ",".join(str(b) for b in sorted(found) if b not in failed))
    out = []
    for broker, dirs in sorted(found.items()):
        if isinstance(dirs, MiniKafkaError):
            out.append({"broker": broker, "error": str(dirs)})
            continue
        out.append({"broker": broker, "logDirs": [{
            "logDir": d.path,
            "error": None if d.error_code == 0 else ErrorCode(d.error_code).name,
            "partitions": [{"partition": f"{tp.topic}-{tp.partition}", "size": r.size_bytes,
                            "offsetLag": r.offset_lag, "isFuture": r.is_future}
                           for tp, r in sorted(d.replicas.items())]}
            for d in dirs]})  # fmt: skip
    print(json.dumps({"version": 1, "brokers": out}))
    if failed:
        raise CliError(f"no log dir information from broker(s) {', '.join(map(str, failed))}")
    return 0


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    p = client("log-dirs", "each broker's log dirs and the replicas in them (JSON)")
    p.add_argument("--describe", action="store_true", help="(the only action; Kafka's flag)")
    p.add_argument("--broker-list", default=None, metavar="ID,ID,...")
    p.add_argument("--topic-list", default=None, metavar="TOPIC,TOPIC,...")
    p.set_defaults(func=cmd_log_dirs)
