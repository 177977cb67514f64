"""The metrics port's HTTP side: answers, bounds (connections, head size, deadline), logins
(HTTP Basic, checked against the broker's SCRAM users and ACLs)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from broker.acls import Authorizer, edit_acls
from broker.metrics.endpoint import MAX_HEAD_BYTES, Authenticate, MetricsEndpoint
from broker.metrics.scrape_login import scrape_login
from broker.users import ScramUsers, add_user


class Answer(Collector):
    def __init__(self) -> None:
        self.collected = 0

    def collect(self) -> Iterator[Metric]:
        self.collected += 1
        yield GaugeMetricFamily("minikafka_answer", "the answer", value=42)


def run(test: Callable[[MetricsEndpoint, Answer], Awaitable[None]], max_connections: int = 4,
        read_timeout_s: float = 5.0, authenticate: Authenticate | None = None) -> None:
    async def main() -> None:
        collector = Answer()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, max_connections, read_timeout_s,
                                   authenticate)
        await endpoint.start()
        try:
            await asyncio.wait_for(test(endpoint, collector), 10)
        finally:
            await endpoint.stop()

    asyncio.run(main())


async def http(port: int, head: bytes) -> bytes:
    """Send ``head``, read the whole answer (the server closes after it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def get(path: str = "/metrics", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def test_get_metrics_answers_the_registry_in_the_text_format() -> None:
    async def test(endpoint: MetricsEndpoint, collector: Answer) -> None:
        answer = await http(endpoint.port, get())
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"Content-Type: text/plain; version=" in head
        assert f"Content-Length: {len(body)}".encode() in head
        families = list(text_string_to_metric_families(body.decode()))
        assert [(f.name, f.samples[0].value) for f in families] == [("minikafka_answer", 42)]
        assert collector.collected == 1 and endpoint.scrapes == 1

    run(test)


@pytest.mark.parametrize("head, status", [
    (get("/nope"), b"404"), (b"POST /metrics HTTP/1.1\r\n\r\n", b"405"),
    (b"GARBAGE\r\n\r\n", b"400")])
def test_other_requests_get_an_error_and_no_scrape(head: bytes, status: bytes) -> None:
    async def test(endpoint: MetricsEndpoint, collector: Answer) -> None:
        assert (await http(endpoint.port, head)).split(b" ")[1] == status
        assert collector.collected == 0

    run(test)


def test_an_oversized_or_slow_head_is_closed_unanswered() -> None:
    async def test(endpoint: MetricsEndpoint, collector: Answer) -> None:
        big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
        assert await http(endpoint.port, big) == b""
        assert await http(endpoint.port, b"GET /metrics HTTP/1.1\r\n") == b""  # deadline
        assert collector.collected == 0

    run(test, read_timeout_s=0.3)


def test_connections_beyond_the_bound_are_closed_at_once() -> None:
    async def test(endpoint: MetricsEndpoint, collector: Answer) -> None:
        idle = [await asyncio.open_connection("127.0.0.1", endpoint.port) for _ in range(2)]
        while endpoint.open_connections < 2:  # the server took both (no time passes)
            await asyncio.sleep(0)
        reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
        assert await reader.read() == b""  # closed without reading a request
        writer.close()
        for _, w in idle:
            w.close()
        for r, _ in idle:
            await r.read()
        assert (await http(endpoint.port, get())).startswith(b"HTTP/1.1 200")

    run(test, max_connections=2)


def test_logins_are_checked_when_asked() -> None:
    def authenticate(user: str, password: bytes) -> int | None:
        if (user, password) == ("ops", b"secret"):
            return None
        return 403 if (user, password) == ("alice", b"pw") else 401

    def basic(user: str, password: str) -> str:
        return "Authorization: Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode() + "\r\n"

    async def test(endpoint: MetricsEndpoint, collector: Answer) -> None:
        none = await http(endpoint.port, get())
        assert none.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Basic" in none
        wrong = await http(endpoint.port, get(extra=basic("ops", "guess")))
        assert wrong.startswith(b"HTTP/1.1 401")
        assert (await http(endpoint.port, get(extra="Authorization: Basic !!\r\n"))
                ).startswith(b"HTTP/1.1 401")
        assert (await http(endpoint.port, get(extra=basic("alice", "pw")))
                ).startswith(b"HTTP/1.1 403")
        assert collector.collected == 0
        assert (await http(endpoint.port, get(extra=basic("ops", "secret")))
                ).startswith(b"HTTP/1.1 200")

    run(test, authenticate=authenticate)


def test_a_scrape_logs_in_as_a_sasl_user_and_needs_describe_on_the_cluster(
        tmp_path: Path) -> None:
    users_file, acl_file = tmp_path / "users.txt", tmp_path / "acls.txt"
    add_user(users_file, "prom", b"scrape-secret")
    add_user(users_file, "alice", b"alice-secret")
    edit_acls(acl_file, add=["User:prom", "Allow", "Describe", "Cluster", "kafka-cluster"])
    check = scrape_login(ScramUsers(str(users_file)),
                         Authorizer(True, str(acl_file), super_users=""))
    assert check("prom", b"scrape-secret") is None
    assert check("prom", b"wrong") == 401
    assert check("nobody", b"scrape-secret") == 401
    assert check("alice", b"alice-secret") == 403  # a user, without the ACL
    open_check = scrape_login(ScramUsers(str(users_file)), Authorizer(False, ""))
    assert open_check("alice", b"alice-secret") is None  # no ACLs: any user
