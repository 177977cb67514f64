"""``python -m broker start``: run one broker in the foreground (``minikafka broker``).

Flags override the config file, which overrides the defaults (see broker/config.py).
On SIGTERM/SIGINT the broker shuts down cleanly: network processes stopped, logs
flushed, checkpoints and the clean-shutdown marker written.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from clients.protocol.errors import MiniKafkaError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minikafka broker", description="run a broker")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    start = sub.add_parser("start", help="run a broker in the foreground",
                           description="run a broker in the foreground until SIGTERM/SIGINT")
    start.add_argument("--config", default=None, help="properties file (key=value lines)")
    start.add_argument("--node-id", type=int, default=None)
    start.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    start.add_argument("--port", type=int, default=None, help="listen port (default 9092)")
    start.add_argument("--data-dir", default=None)
    to_controller = start.add_mutually_exclusive_group()
    to_controller.add_argument("--controller", default=None, metavar="HOST:PORT",
                               help="controller address (default: standalone broker)")
    to_controller.add_argument(
        "--controller-quorum-voters", default=None, metavar="ID@HOST:PORT,...",
        help="the controller quorum's voters (Kafka's controller.quorum.voters); the "
        "broker follows the active one. --controller HOST:PORT is the one-voter form")
    start.add_argument("--num-network-processes", type=int, default=None)
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="any broker config key, e.g. --override segment_bytes=1048576")
    start.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from broker.config import BrokerConfig, parse_overrides
    from broker.server import run_broker

    try:
        overrides: dict[str, object] = dict(parse_overrides(args.override))
    except MiniKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for flag, key in (("node_id", "node_id"), ("host", "host"), ("port", "port"),
                      ("data_dir", "data_dir"), ("controller", "controller_address"),
                      ("controller_quorum_voters", "controller_address"),
                      ("num_network_processes", "num_network_processes")):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    try:
        config = BrokerConfig.load(args.config, overrides)
        return run_broker(config, on_ready=lambda server: print(
            f"broker {config.node_id} listening on {config.host}:{server.port}", flush=True))
    except MiniKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the port is taken: another broker or process holds it
        print(f"error: cannot listen on {config.host}:{config.port}: {exc.strerror}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
