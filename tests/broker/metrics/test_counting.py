"""The plain-int counters behind the metrics: requests and latency per API, topic traffic,
rendered as prometheus_client families; committed ISR changes; the metrics settings'
validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from broker.config import BrokerConfig
from broker.controller.config import ControllerConfig
from broker.metrics.request_metrics import RequestMetrics
from broker.metrics.request_times import (
    BUCKETS_MS,
    FETCH_CONSUMER,
    FETCH_FOLLOWER,
    fetch_slot,
    kafka_request_name,
)
from broker.metrics.topic_metrics import BYTES_IN, BYTES_OUT, MESSAGES_IN, BrokerTopicMetrics
from broker.replica.isr_proposals import IsrProposals
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, InvalidConfigError
from clients.protocol.topics import TopicPartition
from tests.replication.helpers import batch, make_partition
from tests.replication.test_partition import handshake, replicate
from timer.clock import ManualClock


def samples(collector: Collector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_kafka_names_of_apis() -> None:
    assert kafka_request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert kafka_request_name(ApiKey.OFFSETS_FOR_LEADER_EPOCH) == "OffsetsForLeaderEpoch"
    assert kafka_request_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert (fetch_slot(-1), fetch_slot(2)) == (FETCH_CONSUMER, FETCH_FOLLOWER)


def test_requests_are_counted_and_timed_per_api(monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.metrics.request_metrics as module
    now = [100.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    metrics = RequestMetrics()
    for elapsed_ms in (0.1, 3.0, 3.0, 40_000.0):  # the last one past every bound
        now[0] = 100.0 + elapsed_ms / 1000
        metrics.on_response(ApiKey.PRODUCE, 100.0)
    now[0] = 100.002
    metrics.on_response(ApiKey.FETCH, 100.0, fetch_slot(1))
    metrics.on_response(9999, 100.0)  # not an API: ignored
    found = samples(metrics)
    name = "kafka_network_requestmetrics_"
    assert found[(name + "requests_total", (("request", "Produce"),))] == 4
    assert found[(name + "requests_total", (("request", "Fetch"),))] == 1
    assert found[(name + "requests_total", (("request", "FetchFollower"),))] == 1
    assert (name + "requests_total", (("request", "FetchConsumer"),)) not in found

    def bucket(le: str) -> float:
        return found[(name + "totaltimems_bucket", (("le", le), ("request", "Produce")))]

    assert bucket("0.25") == 1 and bucket("2.5") == 1 and bucket("5.0") == 3
    assert bucket(str(BUCKETS_MS[-1])) == 3 and bucket("+Inf") == 4
    assert found[(name + "totaltimems_count", (("request", "Produce"),))] == 4
    assert found[(name + "totaltimems_sum", (("request", "Produce"),))] == pytest.approx(
        40_006.1)
    assert metrics.count(ApiKey.PRODUCE) == 4


def test_topic_traffic_is_counted_per_topic_within_its_bound() -> None:
    metrics = BrokerTopicMetrics(max_topics=2)
    metrics.on_append("a", 100, 3)
    metrics.on_append("b", 50, 1)
    metrics.on_append("c", 70, 2)  # past the bound: not tracked per topic
    metrics.on_fetch_response({"responses": [
        {"name": "a", "partitions": [{"records": b"x" * 30}, {"records": None}]},
        {"name": "b", "partitions": [{"records": b""}]}]}, to_follower=False)
    metrics.on_fetch_response({"responses": [
        {"name": "a", "partitions": [{"records": b"y" * 8}]}]}, to_follower=True)
    assert [metrics.value("a", k) for k in (BYTES_IN, MESSAGES_IN, BYTES_OUT)] == [100, 3, 30]
    found = samples(metrics)
    prefix = "kafka_server_brokertopicmetrics_"
    assert found[(prefix + "messagesin_total", (("topic", "b"),))] == 1
    assert (prefix + "messagesin_total", (("topic", "c"),)) not in found
    assert found[(prefix + "replicationbytesout_total", ())] == 8
    assert found[("minikafka_metrics_untracked_topic_bytes_total", ())] == 70
    metrics.retain({"b"})  # "a" deleted: forgotten, room for another topic
    metrics.on_append("c", 70, 2)
    assert (metrics.value("a", BYTES_IN), metrics.value("c", MESSAGES_IN)) == (0, 2)


def test_metrics_settings_are_validated() -> None:
    assert BrokerConfig().metrics_port == -1 and ControllerConfig().metrics_port == -1
    BrokerConfig(metrics_port=0).validate()
    ControllerConfig(metrics_port=9400).validate()
    for bad in (dict(metrics_port=-2), dict(metrics_port=9092),
                dict(metrics_port=0, metrics_host="0.0.0.0"), dict(metrics_max_connections=0)):
        with pytest.raises(InvalidConfigError):
            BrokerConfig(**bad).validate()  # type: ignore[arg-type]
    BrokerConfig(metrics_port=0, metrics_host="0.0.0.0", allow_anonymous_remote=True,
                 host="127.0.0.1").validate()
    for bad in (dict(metrics_port=9093), dict(metrics_port=0, metrics_host="0.0.0.0")):
        with pytest.raises(InvalidConfigError):
            ControllerConfig(**bad).validate()  # type: ignore[arg-type]


def test_committed_isr_changes_are_counted_as_shrinks_and_expands(tmp_path: Path) -> None:
    leader, f2, f3 = (make_partition(tmp_path, b) for b in (1, 2, 3))
    assert leader.make_leader(0, [1, 2, 3], [1, 2, 3], partition_epoch=0, now_ms=0)
    for f in (f2, f3):
        assert f.make_follower(1, 0, [1, 2, 3], partition_epoch=0, isr=[1, 2, 3])
        handshake(leader, f)
    key, clock, sent = TopicPartition("t", 0), ManualClock(), []
    isr = IsrProposals(1, 500, clock, {key: leader}, lambda _: None, sent.append)
    leader.append_records_as_leader(batch(b"a"))
    replicate(leader, f2, now_ms=100)
    replicate(leader, f2, now_ms=200)
    clock.set(800)
    isr.check_isr()  # 3 lags: shrink proposed, not counted before the controller commits
    assert [p.new_isr for p in sent] == [(1, 2)] and (isr.isr_shrinks, isr.isr_expands) == (0, 0)
    isr.on_alter_partition_answer(sent[0], ErrorCode.FENCED_LEADER_EPOCH, None, None)
    assert (isr.isr_shrinks, isr.isr_expands) == (0, 0)  # refused: nothing changed
    assert leader.make_leader(1, [1, 2, 3], [1, 2, 3], partition_epoch=1, now_ms=800)
    clock.set(2000)
    isr.check_isr()
    isr.on_alter_partition_answer(sent[-1], ErrorCode.NONE, [1, 2], 2)
    assert (isr.isr_shrinks, isr.isr_expands) == (1, 0)
    for now_ms in (2100, 2200):
        replicate(leader, f3, now_ms=now_ms)
    isr.maybe_expand_isr(key, 3)
    assert sent[-1].new_isr == (1, 2, 3)
    isr.on_alter_partition_answer(sent[-1], ErrorCode.NONE, [1, 2, 3], 3)
    assert (isr.isr_shrinks, isr.isr_expands) == (1, 1)
