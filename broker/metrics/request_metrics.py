"""Request counts and latencies per API, in plain ints: Kafka's ``RequestMetrics``.

One :class:`RequestMetrics` per broker main process (and one in the controller).  The
server calls :meth:`RequestMetrics.on_response` once per answered request (acks=0
Produce and the SASL exchange included) with the monotonic time the request reached it;
:meth:`collect` renders, on a scrape:

- ``kafka_network_requestmetrics_requests_total{request}`` (a counter);
- ``kafka_network_requestmetrics_totaltimems{request}`` (a histogram in ms, buckets
  :data:`BUCKETS_MS`: ``_bucket{le}``, ``_sum``, ``_count``).

``request`` is Kafka's API name (``Produce``, ``ApiVersions``, ...); a Fetch is counted
as ``Fetch`` and also as ``FetchConsumer`` or ``FetchFollower`` (Kafka does the same).

What the time covers: from the moment the main process takes the request off its channel
(the frame is complete) to the moment the answer is handed to the network process - so
the handler's time and any wait in a purgatory (acks=all, a Fetch's ``max_wait_ms``),
but not the network process's reading of the frame, its wait in the channel, or the
writing of the answer.  Kafka's TotalTimeMs covers those too; here they would need a
timestamp carried through the channel, for a share of the time that is small next to
the handler's and the purgatory's.  A request whose connection is closed unanswered
(malformed, unknown API) is not counted, as in Kafka.

Costs: :meth:`on_response` is one clock read, a bisect over 16 bounds and three list
increments (about 1 us); memory is fixed (slots x buckets ints).  :meth:`collect` is
O(APIs seen x buckets).  Not thread-safe: the event loop's thread calls both.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from clients.protocol.api_keys import ApiKey

# latency bucket bounds, ms (the last bucket, +Inf, is implicit)
BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
              2500.0, 5000.0, 10000.0, 30000.0)
_API_SLOTS = max(ApiKey) + 1
FETCH_CONSUMER = _API_SLOTS  # extra slots: a Fetch counted again by who sent it
FETCH_FOLLOWER = _API_SLOTS + 1
_SLOTS = _API_SLOTS + 2


def kafka_request_name(api_key: int) -> str:
    """Kafka's name of an API (``API_VERSIONS`` -> ``ApiVersions``)."""
    return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))


_NAMES = [kafka_request_name(k) if k in ApiKey._value2member_map_ else ""
          for k in range(_API_SLOTS)] + ["FetchConsumer", "FetchFollower"]


def fetch_slot(replica_id: int) -> int:
    """The extra slot of a Fetch: from a follower (``replica_id >= 0``) or a consumer."""
    return FETCH_FOLLOWER if replica_id >= 0 else FETCH_CONSUMER


class RequestMetrics:
    """Answered requests and their latency per API; see the module docstring."""

    def __init__(self) -> None:
        self._counts = [0] * _SLOTS
        self._sums_ms = [0.0] * _SLOTS
        self._buckets = [[0] * (len(BUCKETS_MS) + 1) for _ in range(_SLOTS)]

    def on_response(self, api_key: int, started_s: float, extra_slot: int = -1) -> None:
        """A request of ``api_key`` that reached the server at ``started_s``
        (``time.monotonic()``) is answered now; ``extra_slot`` counts it once more
        (:func:`fetch_slot`).  Unknown API keys are ignored."""
        if not 0 <= api_key < _API_SLOTS or not _NAMES[api_key]:
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
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests", "Requests answered, per API "
            "(Kafka's RequestsPerSec)", labels=["request"])
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems", "Time from the request reaching "
            "the main process to its answer leaving it, ms (Kafka's TotalTimeMs; see "
            "broker/metrics/request_metrics.py)", labels=["request"])
        le = [str(b) for b in BUCKETS_MS] + ["+Inf"]
        for slot in range(_SLOTS):
            count = self._counts[slot]
            if count == 0:
                continue
            name = _NAMES[slot]
            requests.add_metric([name], count)
            cumulative, buckets = 0, []
            for bound, n in zip(le, self._buckets[slot], strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([name], buckets, self._sums_ms[slot])
        yield requests
        yield latency
