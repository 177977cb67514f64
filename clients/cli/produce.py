"""``minikafka produce``: lines from stdin, one record each (optionally keyed, with
headers, compressed, transactional).

Kafka's ``kafka-console-producer.sh`` is the model.  The topic is the positional
argument or ``--topic``.  A line is split, in this order, into headers (``--parse-headers``:
``k1:v1,k2:v2`` before ``--headers-delimiter``, a tab by default; Kafka's
``parse.headers``, ``headers.delimiter``, ``headers.separator`` and
``headers.key.separator``), a key (before ``--key-separator``) and the value.
``--header KEY=VALUE`` (repeatable) adds a header to every record.  ``--compression``
(``--compression-codec``) picks the batch codec; ``--producer-property KEY=VALUE``
passes any other producer setting (Kafka's dotted names or ours).

Timeouts: ``--max-block-ms`` (default 5000) bounds the wait for the topic's metadata,
so an unknown topic fails within seconds with UNKNOWN_TOPIC_OR_PARTITION; when every
bootstrap address refuses the connection (a stopped cluster) the command fails at once,
before any wait, with NETWORK_EXCEPTION naming the refusal (:func:`refuse_fast`: one TCP
connect per bootstrap address, closed at once) (the producer reports the real cause, see
:mod:`clients.producer.producer`); ``--request-timeout-ms`` and
``--delivery-timeout-ms`` bound each request and each record.

Every record is acknowledged before the command exits; a failure aborts an open
transaction and is reported as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clients.cli.common import CliError
from clients.config.kafka_names import PRODUCER
from clients.network.cluster_metadata import parse_bootstrap
from clients.protocol.errors import ErrorCode, MiniKafkaError

if TYPE_CHECKING:
    from clients.producer.future import RecordFuture
    from clients.producer.producer import Producer

__all__ = ["add_parser", "topic_of"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def topic_of(args: argparse.Namespace) -> str:
    """The topic given positionally or as ``--topic`` (Kafka's spelling); exactly one."""
    if args.topic is not None and args.topic_option is not None \
            and args.topic != args.topic_option:
        raise CliError(f"two topics given: {args.topic!r} and --topic {args.topic_option!r}")
    topic = args.topic if args.topic is not None else args.topic_option
    if topic is None:
        raise CliError("a topic is required (TOPIC or --topic TOPIC)")
    return str(topic)


def producer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Producer's keyword arguments: the flags, then the client settings
    (``--producer.config``, ``--producer-property``: :mod:`clients.cli.connect.settings`)."""
    acks: int | str = args.acks if args.acks == "all" else int(args.acks)
    options: dict[str, Any] = {
        "acks": acks, "linger_ms": args.linger_ms, "transactional_id": args.transactional_id,
        "compression_type": args.compression, "max_block_ms": args.max_block_ms,
        "request_timeout_ms": args.request_timeout_ms,
        "delivery_timeout_ms": args.delivery_timeout_ms,
    }  # fmt: skip
    options.update(getattr(args, "client_settings", {}))
    return options


def refuse_fast(bootstrap: str, max_block_ms: int) -> None:
    """NETWORK_EXCEPTION at once when every bootstrap address refuses a TCP connection
    (or its name does not resolve): nothing listens there, so waiting ``max_block_ms``
    for metadata, as the producer does, cannot help (``topics`` and ``consume`` say the
    same within a second).  An address that accepts, or does not answer within
    ``max_block_ms``, leaves the producer's own wait and error in charge."""
    causes: list[str] = []
    for host, port in parse_bootstrap(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=max_block_ms / 1000):
                return
        except (ConnectionRefusedError, socket.gaierror) as exc:
            causes.append(f"cannot connect to {host}:{port}: {exc}")
        except OSError:
            return
    raise MiniKafkaError(f"no broker reachable: {'; '.join(causes)}",
                         ErrorCode.NETWORK_EXCEPTION)


def cmd_produce(args: argparse.Namespace) -> int:
    """Lines from stdin, one record each.  With ``--transactional-id`` every record goes
    in one transaction committed at the end (or one per ``--transaction-size`` records);
    a failure aborts the open transaction before the error is reported."""
    from clients.producer.producer import Producer

    topic = topic_of(args)
    size = args.transaction_size
    if size is not None and (args.transactional_id is None or size < 1):
        raise CliError("--transaction-size needs --transactional-id and must be >= 1")
    static_headers = [_header(h) for h in args.header]
    refuse_fast(args.bootstrap_server, args.max_block_ms)
    try:
        producer = Producer(bootstrap_servers=args.bootstrap_server, **producer_options(args))
    except TypeError as exc:  # a --producer-property the producer does not know
        raise CliError(f"--producer-property: {exc}") from None
    with producer:
        if args.transactional_id is not None:
            producer.init_transactions()
            producer.begin_transaction()
        try:
            futures = _produce_lines(args, topic, producer, static_headers)
        except Exception:
            if args.transactional_id is not None:
                with contextlib.suppress(Exception):  # the original error is the one to report
                    producer.abort_transaction()
            raise
        count = len(futures)
        producer.flush()
        for future in futures:
            future.result()
    what = "messages" if args.transactional_id is None else "messages in transactions"
    print(f"Produced {count} {what} to {topic}.", file=sys.stderr)
    return 0


def _header(text: str, separator: str = "=") -> tuple[str, bytes]:
    key, sep, value = text.partition(separator)
    if not sep or not key:
        raise CliError(f"a header is KEY{separator}VALUE, got {text!r}")
    return key, value.encode()


def parse_line(args: argparse.Namespace, line: str) -> tuple[list[tuple[str, bytes]],
                                                             bytes | None, bytes]:  # fmt: skip
    """One input line -> (its headers, key, value) as the flags say."""
    headers: list[tuple[str, bytes]] = []
    if args.parse_headers:
        if args.headers_delimiter not in line:
            raise CliError(f"no headers delimiter {args.headers_delimiter!r} in line {line!r}")
        raw, line = line.split(args.headers_delimiter, 1)
        headers = [_header(h, args.headers_key_separator)
                   for h in raw.split(args.headers_separator) if h]
    key = None
    if args.key_separator and args.key_separator in line:
        raw_key, line = line.split(args.key_separator, 1)
        key = raw_key.encode()
    return headers, key, line.encode()


def _produce_lines(args: argparse.Namespace, topic: str, producer: Producer,
                   static_headers: list[tuple[str, bytes]]) -> list[RecordFuture]:
    futures: list[RecordFuture] = []
    transactional = args.transactional_id is not None
    in_transaction = 0
    for line in sys.stdin:
        headers, key, value = parse_line(args, line.rstrip("\n"))
        futures.append(producer.send(topic, value, key=key, partition=args.partition,
                                     headers=static_headers + headers or None))
        in_transaction += 1
        if transactional and args.transaction_size == in_transaction:
            producer.commit_transaction()
            producer.begin_transaction()
            in_transaction = 0
    if transactional:
        producer.commit_transaction()  # the last (maybe empty: nothing is sent then)
    return futures


def add_parser(sub: Any, client: Callable[[str, str], argparse.ArgumentParser]) -> None:
    produce = client("produce", "produce lines from stdin, one record per line")
    produce.add_argument("topic", nargs="?", default=None)
    produce.add_argument("--topic", dest="topic_option", default=None, metavar="TOPIC",
                         help="the topic (Kafka's spelling of the positional argument)")
    produce.add_argument("--key-separator", default=None,
                         help="split each line into key and value at the first separator")
    produce.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                         help="a header on every record (repeatable)")
    produce.add_argument("--parse-headers", action="store_true",
                         help="each line starts with headers k1:v1,k2:v2 and a tab")
    produce.add_argument("--headers-delimiter", default="\t", metavar="TEXT",
                         help="ends a line's headers (default: a tab)")
    produce.add_argument("--headers-separator", default=",", metavar="TEXT")
    produce.add_argument("--headers-key-separator", default=":", metavar="TEXT")
    produce.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"],
                         help="all (default) also enables idempotence, as in Kafka 3")
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--compression", "--compression-codec", dest="compression",
                         default="none", choices=CODECS)
    produce.add_argument("--max-block-ms", type=int, default=5000,
                         help="wait at most this long for the topic's metadata (default 5000)")
    produce.add_argument("--request-timeout-ms", type=int, default=30_000)
    produce.add_argument("--delivery-timeout-ms", type=int, default=120_000,
                         help="give up on a record after this long")
    produce.add_argument("--producer-property", dest="command_property", action="append",
                         default=[], metavar="KEY=VALUE",
                         help="any producer setting (Kafka's name), e.g. batch.size=65536")
    produce.add_argument("--producer.config", dest="command_config", default=None,
                         metavar="FILE", help="producer settings in a properties file")
    produce.add_argument("--transactional-id", default=None, metavar="ID",
                         help="produce in a transaction (all input, or see --transaction-size)")
    produce.add_argument("--transaction-size", type=int, default=None, metavar="N",
                         help="commit a transaction every N records")
    produce.set_defaults(func=cmd_produce, client_names=PRODUCER)
