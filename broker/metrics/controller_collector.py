"""The controller's metrics, read from its state on each scrape: a prometheus_client Collector.

:class:`ControllerCollector` renders, from the controller's
:class:`~broker.controller.state.ControllerState` (its metadata image and election
counters), its failed logins and its :class:`~broker.metrics.request_metrics.RequestMetrics`:

- ``kafka_controller_kafkacontroller_activecontrollercount`` (1: this process is the
  cluster's one controller), ``offlinepartitionscount`` (no leader),
  ``preferredreplicaimbalancecount`` (led by another than the first replica),
  ``globaltopiccount``, ``globalpartitioncount``, ``fencedbrokercount`` and
  ``activebrokercount`` (registered brokers fenced / not; KRaft's names);
- ``kafka_controller_controllerstats_uncleanleaderelections_total``;
- ours: ``minikafka_controller_safe_elections_total`` (leaders chosen by the longest log
  after log recovery cut every live in-sync replica), ``minikafka_controller_offline_
  waiting_partitions`` (offline partitions with a reason to wait, as ``cluster status``
  prints them), ``minikafka_failed_logins_total``;
- the requests the controller handled (its request path: the handled APIs, not the SASL
  exchange).

Costs per scrape: O(partitions + brokers).  Not thread-safe: the controller's event loop
runs the scrape (:mod:`broker.metrics.endpoint`), as it runs every change of the state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from broker.controller.state import ControllerState
from broker.login_failures import LoginFailures
from broker.metadata.records import NO_LEADER
from broker.metrics.request_metrics import RequestMetrics


class ControllerCollector(Collector):
    """The controller's metric families, built per scrape; see the module docstring."""

    def __init__(self, state: Callable[[], ControllerState | None], requests: RequestMetrics,
                 login_failures: LoginFailures) -> None:
        """``state``: the controller's state once its metadata log is open (else None)."""
        self.state = state
        self.requests = requests
        self.login_failures = login_failures

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        prefix = "kafka_controller_kafkacontroller_"
        if state is not None:
            image = state.image
            topics = partitions = offline = imbalance = 0
            topics = len(image.topics)
            for _, _, s in image.partitions():
                partitions += 1
                offline += s.leader == NO_LEADER
                imbalance += s.leader != NO_LEADER and bool(s.replicas) \
                    and s.leader != s.replicas[0]
            fenced = sum(1 for b in image.brokers.values() if b.fenced)
            gauges = (
                ("activecontrollercount", "1: this process is the active controller", 1),
                ("offlinepartitionscount", "Partitions without a leader", offline),
                ("preferredreplicaimbalancecount", "Partitions led by another replica than "
                 "their preferred (first) one", imbalance),
                ("globaltopiccount", "Topics in the cluster", topics),
                ("globalpartitioncount", "Partitions in the cluster", partitions),
                ("fencedbrokercount", "Registered brokers that are fenced", fenced),
                ("activebrokercount", "Registered brokers that are not fenced",
                 len(image.brokers) - fenced),
            )
            for name, doc, value in gauges:
                yield GaugeMetricFamily(prefix + name, doc, value=value)
            yield CounterMetricFamily(
                "kafka_controller_controllerstats_uncleanleaderelections", "Leaders chosen "
                "outside the ISR (unclean.leader.election.enable)",
                value=state.unclean_elections)
            yield CounterMetricFamily(
                "minikafka_controller_safe_elections", "Leaders chosen by the longest log "
                "after log recovery cut every live in-sync replica", value=state.safe_elections)
            yield GaugeMetricFamily(
                "minikafka_controller_offline_waiting_partitions", "Offline partitions "
                "waiting (for replicas to report their logs, or a fenced broker)",
                value=len(state.offline_reasons))
        yield CounterMetricFamily("minikafka_failed_logins", "Failed SASL logins",
                                  value=self.login_failures.recorded)
        yield from self.requests.collect()
