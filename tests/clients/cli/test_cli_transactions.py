"""``minikafka produce --transactional-id`` / ``consume --isolation-level`` against the
fake transaction coordinator (in process: ``main`` with stdin replaced)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from clients.cli.main import main
from clients.protocol.topics import TopicPartition
from clients.records.batch import iter_batches
from tests.clients.producer.fake_txn_coordinator import FakeTxnCluster

T0 = TopicPartition("t", 0)


@pytest.fixture
def txn_cluster() -> Iterator[FakeTxnCluster]:
    c = FakeTxnCluster(1)
    c.create_topic("t", 1)
    try:
        yield c
    finally:
        c.close()
    assert c.errors == []


def produce(monkeypatch: pytest.MonkeyPatch, cluster: FakeTxnCluster, lines: str,
            *extra: str) -> int:  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    return main(["produce", "t", "--bootstrap-server", cluster.bootstrap, "--partition", "0",
                 *extra])  # fmt: skip


def markers(cluster: FakeTxnCluster) -> int:
    return sum(next(iter_batches(raw))[1].is_control for raw in cluster.batches(T0))


def test_all_input_in_one_transaction_or_n_per_transaction(
        monkeypatch: pytest.MonkeyPatch, txn_cluster: FakeTxnCluster,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert produce(monkeypatch, txn_cluster, "a\nb\nc\n", "--transactional-id", "cli") == 0
    assert markers(txn_cluster) == 1 and txn_cluster.txns["cli"].commits == 1
    assert produce(monkeypatch, txn_cluster, "d\ne\nf\ng\nh\n", "--transactional-id", "cli",
                   "--transaction-size", "2") == 0  # fmt: skip
    assert txn_cluster.txns["cli"].commits == 4  # 1 + (d e) (f g) (h)
    assert "Produced 5 messages in transactions to t." in capsys.readouterr().err
    assert main(["consume", "t", "--bootstrap-server", txn_cluster.bootstrap,
                 "--from-beginning", "--max-messages", "8", "--timeout-ms", "2000",
                 "--isolation-level", "read_committed"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == list("abcdefgh")


def test_transaction_size_needs_a_transactional_id(
        monkeypatch: pytest.MonkeyPatch, txn_cluster: FakeTxnCluster,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert produce(monkeypatch, txn_cluster, "a\n", "--transaction-size", "2") == 1
    assert "--transaction-size needs --transactional-id" in capsys.readouterr().err


def test_read_committed_skips_an_aborted_transaction(
        monkeypatch: pytest.MonkeyPatch, txn_cluster: FakeTxnCluster,
        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from clients.producer.producer import Producer

    with Producer(txn_cluster.bootstrap, transactional_id="other", linger_ms=0) as prod:
        prod.init_transactions()
        prod.begin_transaction()
        prod.send("t", b"aborted", partition=0)
        prod.flush()
        prod.abort_transaction()
    assert produce(monkeypatch, txn_cluster, "kept\n", "--transactional-id", "cli") == 0
    consume = ["consume", "t", "--bootstrap-server", txn_cluster.bootstrap, "--from-beginning",
               "--timeout-ms", "500"]  # fmt: skip
    capsys.readouterr()
    assert main([*consume, "--isolation-level", "read_committed"]) == 0
    assert capsys.readouterr().out.splitlines() == ["kept"]
    assert main(consume) == 0
    assert capsys.readouterr().out.splitlines() == ["aborted", "kept"]
