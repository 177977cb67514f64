"""Request metrics of a real broker with two network processes, scraped over HTTP: every
request is counted once, and the phases measured in the network processes (the wait
between the processes, the write of the answer, sendfile for a Fetch) are there."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients.admin import Admin
from clients.consumer.consumer import Consumer
from clients.producer.producer import Producer
from clients.types import NewTopic, TopicPartition
from tests.broker.processes import BrokerProcess, wait_until
from tests.broker.raw_kafka import api_versions, connect, recv_frame

pytestmark = [pytest.mark.multiprocess]

REQUESTS = 24
CONNECTIONS = 4
PREFIX = "kafka_network_requestmetrics_"
PHASES = ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
          "responsesendtimems", "totaltimems")
_METRICS_AT = re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(samples: Samples, name: str, request: str) -> float:
    return samples.get((PREFIX + name, frozenset({("request", request)})), 0.0)


def metrics_port(broker: BrokerProcess) -> int:
    found: list[int] = []

    def logged() -> bool:
        found.extend(int(m.group(1)) for line in list(broker.output)
                     if (m := _METRICS_AT.search(line)))
        return bool(found)

    wait_until(logged, 30, "the metrics port in the broker's log")
    return found[0]


def test_requests_are_timed_across_the_network_processes(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, overrides={"metrics_port": 0, "num_network_processes": 2},
                           extra_args=["--log-level", "INFO"])
    with broker:
        port = metrics_port(broker)
        socks = [connect(broker.port) for _ in range(CONNECTIONS)]
        try:
            for i in range(REQUESTS):
                sock = socks[i % CONNECTIONS]
                sock.sendall(api_versions())
                recv_frame(sock)
        finally:
            for sock in socks:
                sock.close()
        # recorded by the network process when the answer's last byte is out
        wait_until(lambda: of(scrape(port), "requests_total", "ApiVersions") >= REQUESTS, 10,
                   "every ApiVersions counted")
        after = scrape(port)
        assert of(after, "requests_total", "ApiVersions") == REQUESTS
        for phase in PHASES:
            assert of(after, phase + "_count", "ApiVersions") == REQUESTS, phase
        # the network side: waiting between the processes and writing the answer
        for phase in ("requestqueuetimems", "responsequeuetimems", "responsesendtimems"):
            assert of(after, phase + "_sum", "ApiVersions") > 0, phase
        # the phases add up to the total (each sum is rounded to whole microseconds)
        parts = sum(of(after, phase + "_sum", "ApiVersions") for phase in PHASES[:-1])
        assert of(after, "totaltimems_sum", "ApiVersions") == pytest.approx(
            parts, abs=REQUESTS * len(PHASES) / 1000)

        # a consumer's Fetch: its records leave with sendfile from the network process
        with Admin(broker.bootstrap) as admin:
            admin.create_topics([NewTopic("timed", 1, 1)])
        with Producer(broker.bootstrap) as producer:
            producer.send("timed", b"x" * 1000, partition=0).result(30)
        with Consumer(broker.bootstrap, enable_auto_commit=False) as consumer:
            tp = TopicPartition("timed", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            wait_until(lambda: bool(consumer.poll(200)), 20, "the record fetched")
        wait_until(lambda: of(scrape(port), "requests_total", "FetchConsumer") > 0, 10,
                   "a consumer's Fetch counted")
        fetched = scrape(port)
        assert of(fetched, "requests_total", "Fetch") >= of(fetched, "requests_total",
                                                             "FetchConsumer") > 0
        assert of(fetched, "responsesendtimems_sum", "FetchConsumer") > 0
        assert of(fetched, "requests_total", "Produce") == 1
        assert of(fetched, "totaltimems_count", "Produce") == 1
