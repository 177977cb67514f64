"""Bytes and records in and out per topic, in plain ints: Kafka's ``BrokerTopicMetrics``.

One :class:`BrokerTopicMetrics` per broker (the core holds it; the Produce handler and
the server count into it):

- :meth:`on_append`: records a leader appended for a Produce (``BytesInPerSec``: the
  batches' bytes as sent; ``MessagesInPerSec``: their records);
- :meth:`on_fetch_response`: the record bytes of a Fetch answer, by topic, to a consumer
  (``BytesOutPerSec``) or broker-wide to a follower (``ReplicationBytesOutPerSec``: Kafka
  keeps replication out of ``BytesOut``).

:meth:`collect` renders ``kafka_server_brokertopicmetrics_{bytesin,messagesin,bytesout}_total
{topic}`` and ``kafka_server_brokertopicmetrics_replicationbytesout_total``.

Bound: at most ``max_topics`` topics are tracked (``metrics_max_topics``); traffic of
further topics is left out of the per-topic series (and counted in
``minikafka_metrics_untracked_topic_bytes_total``).  :meth:`retain` (each scrape) forgets
topics no longer hosted here, as Kafka removes a deleted topic's metrics.

Costs: :meth:`on_append` one dict lookup and two additions per partition appended;
:meth:`on_fetch_response` O(topics + partitions) of the answer (it is being encoded
anyway); :meth:`collect` O(topics).  Not thread-safe: the event loop's thread only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

BYTES_IN, MESSAGES_IN, BYTES_OUT = range(3)


class BrokerTopicMetrics:
    """Per-topic traffic counters; see the module docstring."""

    def __init__(self, max_topics: int) -> None:
        self.max_topics = max_topics
        self._topics: dict[str, list[int]] = {}
        self.replication_bytes_out = 0
        self.untracked_bytes = 0  # in or out, of topics past max_topics

    def _counters(self, topic: str) -> list[int] | None:
        counters = self._topics.get(topic)
        if counters is None and len(self._topics) < self.max_topics:
            counters = self._topics[topic] = [0, 0, 0]
        return counters

    def on_append(self, topic: str, size_bytes: int, records: int) -> None:
        """A leader appended ``records`` records in ``size_bytes`` of batches."""
        counters = self._counters(topic)
        if counters is None:
            self.untracked_bytes += size_bytes
            return
        counters[BYTES_IN] += size_bytes
        counters[MESSAGES_IN] += records

    def on_fetch_response(self, body: Mapping[str, Any], to_follower: bool) -> None:
        """A Fetch answer leaves: count its record bytes."""
        for topic in body["responses"]:
            size = sum(len(p["records"] or b"") for p in topic["partitions"])
            if size == 0:
                continue
            if to_follower:
                self.replication_bytes_out += size
                continue
            counters = self._counters(topic["name"])
            if counters is None:
                self.untracked_bytes += size
            else:
                counters[BYTES_OUT] += size

    def value(self, topic: str, which: int) -> int:
        """One counter of ``topic`` (:data:`BYTES_IN`, ...; 0 when not tracked)."""
        counters = self._topics.get(topic)
        return counters[which] if counters is not None else 0

    def retain(self, hosted_topics: Collection[str]) -> None:
        """Forget the topics not hosted here any more (deleted or moved away)."""
        for topic in [t for t in self._topics if t not in hosted_topics]:
            del self._topics[topic]

    def collect(self) -> Iterator[Metric]:
        prefix = "kafka_server_brokertopicmetrics_"
        families = [
            CounterMetricFamily(prefix + "bytesin", "Record bytes produced to this broker "
                                "as leader (Kafka's BytesInPerSec)", labels=["topic"]),
            CounterMetricFamily(prefix + "messagesin", "Records produced to this broker "
                                "as leader (Kafka's MessagesInPerSec)", labels=["topic"]),
            CounterMetricFamily(prefix + "bytesout", "Record bytes fetched by consumers "
                                "(Kafka's BytesOutPerSec)", labels=["topic"]),
        ]
        for topic, counters in sorted(self._topics.items()):
            for family, value in zip(families, counters, strict=True):
                family.add_metric([topic], value)
        yield from families
        yield CounterMetricFamily(prefix + "replicationbytesout", "Record bytes fetched by "
                                  "followers (Kafka's ReplicationBytesOutPerSec)",
                                  value=self.replication_bytes_out)
        yield CounterMetricFamily("minikafka_metrics_untracked_topic_bytes", "Record bytes "
                                  "in and out of topics beyond metrics_max_topics",
                                  value=self.untracked_bytes)
