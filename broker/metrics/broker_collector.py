"""The broker's metrics, read from its state on each scrape: a prometheus_client Collector.

:class:`BrokerCollector` is registered in the broker's own ``CollectorRegistry`` (never
the process-global default one) and renders, each scrape, from the broker core
(:class:`BrokerState`: the Protocol ``BrokerCore`` satisfies, checked by mypy where
``broker.server`` hands it over) and the server's parts:

- ReplicaManager gauges (``kafka_server_replicamanager_``): ``partitioncount``,
  ``leadercount``, ``underreplicatedpartitions`` (led here, ISR smaller than the
  replicas), ``underminisrpartitioncount`` / ``atminisrpartitioncount`` (led here, ISR
  below / at the topic's min.insync.replicas), and the counters ``isrshrinks_total`` /
  ``isrexpands_total`` (ISR changes this broker proposed as leader and the controller
  committed);
- purgatories (``kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation}``,
  ``Produce`` and ``Fetch``: watch-list entries, Kafka's PurgatorySize);
- :class:`~broker.metrics.request_metrics.RequestTimesCollector` (every request's
  phases, recorded by the network processes),
  :class:`~broker.metrics.topic_metrics.BrokerTopicMetrics`, the replica fetchers' bytes
  (``kafka_server_brokertopicmetrics_replicationbytesin_total``) and the consumer-group
  lag (:mod:`broker.metrics.group_lag`);
- transaction coordinator: ``minikafka_txn_coordinator_transactional_ids{state}``;
- ours (``minikafka_``): the BufferPool (bytes allocated / available / total, waiters),
  damaged ranges found (scrubber and recovery) and segments repaired, partitions with a
  recovery-cut mark, failed logins.

Why collected on scrape, on the event loop: the counting on the hot paths stays plain
int additions (no prometheus_client object per request or record), and every read of
the core happens on the thread that owns it (the core is not thread-safe), with no
locking.  The endpoint (:mod:`broker.metrics.endpoint`) runs the scrape on that loop.

Costs per scrape: O(hosted partitions + topics + committed offsets of coordinated groups
(bounded) + transactional ids coordinated here + APIs); a scrape of a broker with 1,000
partitions takes a few ms of the loop.  Not thread-safe: the event loop's thread only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.group.offsets_topic import OffsetsTopic
from broker.login_failures import LoginFailures
from broker.metrics.group_lag import group_lag_families
from broker.metrics.request_metrics import RequestTimesCollector
from broker.metrics.topic_metrics import BrokerTopicMetrics
from broker.replica.damage_repair import DamageRepair
from broker.replica.isr_proposals import IsrProposals
from broker.replica.recovery_marks import RecoveryMarks
from broker.replica.topic_configs import TopicConfigs
from broker.replica_fetcher import ReplicaFetcherManager
from broker.txn.state_topic import TransactionStateTopic
from clients.memory.buffer_pool import BufferPool
from clients.protocol.topics import TopicPartition
from replication.partition import Partition
from timer.purgatory import Purgatory


class BrokerState(Protocol):
    """What the collector reads of the broker core (:class:`broker.core.BrokerCore`)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def partitions(self) -> dict[TopicPartition, Partition]: ...

    @property
    def produce_purgatory(self) -> Purgatory[DelayedProduce]: ...

    @property
    def fetch_purgatory(self) -> Purgatory[DelayedFetch]: ...

    @property
    def configs(self) -> TopicConfigs: ...

    @property
    def isr(self) -> IsrProposals: ...

    @property
    def recovery(self) -> RecoveryMarks: ...

    @property
    def repair(self) -> DamageRepair: ...

    @property
    def groups(self) -> OffsetsTopic: ...

    @property
    def transactions(self) -> TransactionStateTopic: ...

    @property
    def topic_metrics(self) -> BrokerTopicMetrics: ...


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class BrokerCollector(Collector):
    """The broker's metric families, built per scrape; see the module docstring."""

    def __init__(self, core: BrokerState, requests: RequestTimesCollector, pool: BufferPool,
                 login_failures: LoginFailures,
                 fetchers: ReplicaFetcherManager | None = None) -> None:
        """``fetchers``: the replica fetchers (controller mode; None standalone)."""
        self.core = core
        self.fetchers = fetchers
        self.requests = requests
        self.pool = pool
        self.login_failures = login_failures

    def collect(self) -> Iterator[Metric]:
        core = self.core
        yield from self._replica_manager()
        purgatory = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize", "Operations watched "
            "in the purgatory, completed ones included until purged (PurgatorySize)",
            labels=["delayedOperation"])
        purgatory.add_metric(["Produce"], core.produce_purgatory.watched)
        purgatory.add_metric(["Fetch"], core.fetch_purgatory.watched)
        yield purgatory
        yield from self.requests.collect()
        core.topic_metrics.retain({key.topic for key in core.partitions})
        yield from core.topic_metrics.collect()
        yield _counter("kafka_server_brokertopicmetrics_replicationbytesin", "Record bytes "
                       "fetched from leaders as a follower (ReplicationBytesInPerSec)",
                       self.fetchers.replication_bytes_in if self.fetchers else 0)
        yield from group_lag_families(core.groups.coordinator.groups, core.partitions,
                                      core.config.metrics_max_lag_series)
        yield self._transactions()
        yield from self._ours()

    def _replica_manager(self) -> Iterator[Metric]:
        core = self.core
        prefix = "kafka_server_replicamanager_"
        leaders = under = under_min = at_min = 0
        for key, p in core.partitions.items():
            if not p.is_leader:
                continue
            leaders += 1
            isr = len(p.isr)
            under += isr < len(p.replicas)
            min_isr = core.configs.min_insync_replicas(key.topic)
            under_min += isr < min_isr
            at_min += isr == min_isr
        yield _gauge(prefix + "partitioncount", "Partitions with a replica on this broker",
                     len(core.partitions))
        yield _gauge(prefix + "leadercount", "Partitions this broker leads", leaders)
        yield _gauge(prefix + "underreplicatedpartitions", "Partitions led here whose ISR "
                     "is smaller than their replica set", under)
        yield _gauge(prefix + "underminisrpartitioncount", "Partitions led here whose ISR "
                     "is below min.insync.replicas (acks=all produce fails)", under_min)
        yield _gauge(prefix + "atminisrpartitioncount", "Partitions led here whose ISR is "
                     "at min.insync.replicas", at_min)
        yield _counter(prefix + "isrshrinks", "ISR shrinks committed for partitions led "
                       "here", core.isr.isr_shrinks)
        yield _counter(prefix + "isrexpands", "ISR expansions committed for partitions led "
                       "here", core.isr.isr_expands)

    def _transactions(self) -> Metric:
        family = GaugeMetricFamily("minikafka_txn_coordinator_transactional_ids",
                                   "Transactional ids this broker coordinates, by state",
                                   labels=["state"])
        states = Counter(entry.meta.state.value[1] for entry in
                         self.core.transactions.coordinator.entries.values())
        for state, count in sorted(states.items()):
            family.add_metric([state], count)
        return family

    def _ours(self) -> Iterator[Metric]:
        core = self.core
        pool = self.pool.metrics()
        yield _gauge("minikafka_bufferpool_allocated_bytes", "BufferPool bytes held by live "
                     "buffers (requests and responses)", pool.allocated_bytes)
        yield _gauge("minikafka_bufferpool_available_bytes", "BufferPool bytes free",
                     pool.available_memory)
        yield _gauge("minikafka_bufferpool_total_bytes", "BufferPool size (buffer_pool_bytes)",
                     pool.total_bytes)
        yield _gauge("minikafka_bufferpool_waiters", "Allocations waiting for BufferPool "
                     "memory", pool.waiter_count)
        yield _counter("minikafka_damage_found", "Damaged log ranges found by the scrubber "
                       "or by log recovery", core.repair.damage_found)
        yield _counter("minikafka_segments_repaired", "Damaged segments rewritten from the "
                       "leader's copy", core.repair.segments_repaired)
        yield _gauge("minikafka_recovery_cut_partitions", "Partitions whose log recovery cut "
                     "acknowledged records at the last start (marked until healed)",
                     len(core.recovery.recovery_cuts))
        yield _counter("minikafka_failed_logins", "Failed SASL logins",
                       self.login_failures.recorded)
