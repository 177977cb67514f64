"""Request counts and latencies per API rendered as Kafka's ``RequestMetrics`` families.

Two sources, one rendering:

- a broker: :class:`RequestTimesCollector` reads its network processes' shared table
  (:mod:`broker.metrics.request_times`: every request, all of Kafka's phases, measured
  from the frame's arrival in a network process to its answer's last byte);
- the controller (one process, its own asyncio server): :class:`RequestMetrics`, plain
  ints counted by its server, :meth:`RequestMetrics.on_response` once per answered
  request with the monotonic time the request reached it (TotalTimeMs only).

Families (``request`` is Kafka's API name, ``Produce``, ``ApiVersions``, ...; a Fetch is
counted as ``Fetch`` and also as ``FetchConsumer`` or ``FetchFollower``, as Kafka does):

- ``kafka_network_requestmetrics_requests_total{request}`` (a counter);
- ``kafka_network_requestmetrics_<phase>{request}`` for each phase a source measures
  (``totaltimems``; a broker also ``requestqueuetimems``, ``localtimems``,
  ``remotetimems``, ``responsequeuetimems``, ``responsesendtimems``): histograms in
  ms, buckets :data:`~broker.metrics.request_times.BUCKETS_MS` (``_bucket{le}``,
  ``_sum``, ``_count``).

A request whose connection is closed unanswered (malformed, unknown API) is not counted,
as in Kafka; nor, on a broker, one whose connection is gone before its answer is written.

Costs: :meth:`RequestMetrics.on_response` is one clock read, a bisect over 16 bounds and
three list increments (about 1 us); memory is fixed (slots x buckets ints).  Rendering
is O(APIs seen x phases x buckets), on a scrape.  Not thread-safe: the event loop's
thread calls both.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from broker.metrics.request_times import BUCKETS_MS, PHASES, SLOTS, RequestTimesTable, slot_names

_NAMES = slot_names()
_LE = [str(b) for b in BUCKETS_MS] + ["+Inf"]
_PREFIX = "kafka_network_requestmetrics_"
_PHASE_DOCS = {  # "Time ...": the help of each family
    "RequestQueueTimeMs": "from the frame's arrival in a network process to the main "
                          "process taking it off the channel",
    "LocalTimeMs": "in the handler, in the main process",
    "RemoteTimeMs": "waiting in a purgatory (acks=all, a Fetch's max_wait_ms) or for "
                    "the record-check thread",
    "ResponseQueueTimeMs": "from the answer to its network process taking it (encoding, "
                           "pool memory, the channel)",
    "ResponseSendTimeMs": "to write the answer (sendfile included) until its last byte",
    "TotalTimeMs": "from the frame's arrival in a network process to its answer's last "
                   "byte",
}


def _families(docs: dict[str, str]
              ) -> tuple[CounterMetricFamily, list[HistogramMetricFamily]]:
    """The requests counter and a histogram per phase of ``docs`` (phase -> help)."""
    requests = CounterMetricFamily(_PREFIX + "requests", "Requests answered, per API "
                                   "(Kafka's RequestsPerSec)", labels=["request"])
    histograms = [HistogramMetricFamily(
        _PREFIX + phase.lower(), f"Time {doc}, ms (Kafka's {phase})", labels=["request"])
        for phase, doc in docs.items()]
    return requests, histograms


def _add(family: HistogramMetricFamily, name: str, counts: list[int], sum_ms: float) -> None:
    cumulative, buckets = 0, []
    for bound, n in zip(_LE, counts, strict=True):
        cumulative += n
        buckets.append((bound, cumulative))
    family.add_metric([name], buckets, sum_ms)


class RequestTimesCollector:
    """A broker's request metrics, read from its network processes' table per scrape."""

    def __init__(self, table: RequestTimesTable) -> None:
        self.table = table

    def collect(self) -> Iterator[Metric]:
        requests, histograms = _families({phase: _PHASE_DOCS[phase] for phase in PHASES})
        for slot, phases in enumerate(self.table.totals()):
            if phases is None:
                continue
            name = _NAMES[slot]
            requests.add_metric([name], sum(phases[-1][0]))  # TotalTimeMs' count
            for family, (counts, sum_ms) in zip(histograms, phases, strict=True):
                _add(family, name, counts, sum_ms)
        yield requests
        yield from histograms


class RequestMetrics:
    """Answered requests and their latency per API in one process; see the module
    docstring."""

    def __init__(self) -> None:
        self._counts = [0] * SLOTS
        self._sums_ms = [0.0] * SLOTS
        self._buckets = [[0] * (len(BUCKETS_MS) + 1) for _ in range(SLOTS)]

    def on_response(self, api_key: int, started_s: float, extra_slot: int = -1) -> None:
        """A request of ``api_key`` that reached the server at ``started_s``
        (``time.monotonic()``) is answered now; ``extra_slot`` counts it once more
        (:func:`~broker.metrics.request_times.fetch_slot`).  Unknown API keys are
        ignored."""
        if not 0 <= api_key < SLOTS - 2 or not _NAMES[api_key]:
            return
        elapsed_ms = (time.monotonic() - started_s) * 1000.0
        bucket = bisect.bisect_left(BUCKETS_MS, elapsed_ms)
        for slot in (api_key, extra_slot):
            if slot < 0:
                continue
            self._counts[slot] += 1
            self._sums_ms[slot] += elapsed_ms
            self._buckets[slot][bucket] += 1

    def count(self, api_key: int) -> int:
        """Answered requests of ``api_key`` (or an extra slot) so far."""
        return self._counts[api_key]

    def collect(self) -> Iterator[Metric]:
        requests, (latency,) = _families({"TotalTimeMs": "from the request reaching the "
                                          "process to its answer leaving it"})
        for slot in range(SLOTS):
            count = self._counts[slot]
            if count == 0:
                continue
            requests.add_metric([_NAMES[slot]], count)
            _add(latency, _NAMES[slot], self._buckets[slot], self._sums_ms[slot])
        yield requests
        yield latency
