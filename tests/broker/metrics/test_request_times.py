"""The shared table of request times: six phases per request from six instants, summed
over the network processes' regions, rendered with Kafka's RequestMetrics names; the
main process's instants on the channel's answer messages."""

from __future__ import annotations

import msgpack
import pytest

from broker.metrics.request_metrics import RequestTimesCollector
from broker.metrics.request_times import (
    FETCH_CONSUMER,
    FETCH_FOLLOWER,
    PHASES,
    RequestTimesTable,
    pack_slots,
)
from broker.network.channel.codec import (
    NO_RESPONSE,
    RESPONSE,
    ChannelProtocolError,
    decode_message,
    encode_no_response,
    encode_response,
)
from clients.protocol.api_keys import ApiKey
from tests.broker.metrics.test_counting import samples


def test_each_phase_is_the_gap_between_two_instants_summed_over_processes() -> None:
    table = RequestTimesTable.create(2)
    try:
        # read 0, dequeued +1 ms, handler done +3, answered +10 (purgatory), the network
        # process took it +10.5 and wrote its last byte +12
        instants = (100.0, 100.001, 100.003, 100.010, 100.0105, 100.012)
        table.writer(0).record(pack_slots(ApiKey.PRODUCE), *instants)
        table.writer(1).record(pack_slots(ApiKey.PRODUCE), *instants)
        table.writer(1).record(pack_slots(ApiKey.FETCH, FETCH_FOLLOWER), *instants)
        table.writer(0).record(pack_slots(9999 & 0xFF), *instants)  # no such API: ignored
        table.writer(0).record(pack_slots(ApiKey.FETCH, 5), *instants)  # bad extra slot
        totals = table.totals()
        produce = totals[ApiKey.PRODUCE]
        assert produce is not None
        expected_ms = (1.0, 2.0, 7.0, 0.5, 1.5, 12.0)
        for phase, (counts, sum_ms), ms in zip(PHASES, produce, expected_ms, strict=True):
            assert sum(counts) == 2, phase
            assert sum_ms == pytest.approx(2 * ms, abs=0.01), phase
        assert totals[FETCH_FOLLOWER] is not None and totals[FETCH_CONSUMER] is None
        assert totals[ApiKey.METADATA] is None

        found = samples(RequestTimesCollector(table))
        name = "kafka_network_requestmetrics_"
        assert found[(name + "requests_total", (("request", "Produce"),))] == 2
        assert found[(name + "requests_total", (("request", "Fetch"),))] == 1
        assert found[(name + "requests_total", (("request", "FetchFollower"),))] == 1
        assert found[(name + "remotetimems_sum", (("request", "Produce"),))] == \
            pytest.approx(14.0, abs=0.01)
        assert found[(name + "responsesendtimems_bucket",
                      (("le", "2.5"), ("request", "Produce")))] == 2
        assert found[(name + "requestqueuetimems_bucket",
                      (("le", "0.5"), ("request", "Produce")))] == 0
        assert found[(name + "totaltimems_count", (("request", "Produce"),))] == 2

        # a restarted network process writes the same region: the counts go on
        table.writer(0).record(pack_slots(ApiKey.PRODUCE), *instants)
        again = table.totals()[ApiKey.PRODUCE]
        assert again is not None and sum(again[-1][0]) == 3
    finally:
        table.close()


def test_a_negative_gap_counts_as_zero() -> None:
    table = RequestTimesTable.create(1)
    try:
        table.writer(0).record(pack_slots(ApiKey.METADATA), 5.0, 4.0, 4.0, 4.0, 4.0, 6.0)
        metadata = table.totals()[ApiKey.METADATA]
        assert metadata is not None
        queue_counts, queue_ms = metadata[0]
        assert queue_counts[0] == 1 and queue_ms == 0.0
        assert metadata[-1][1] == pytest.approx(1000.0)
    finally:
        table.close()


def test_the_answer_carries_the_main_process_instants_or_nothing() -> None:
    handle = (1, 4096, 7)
    timing = (pack_slots(ApiKey.FETCH, FETCH_CONSUMER), 1.0, 1.5, 2.0)
    assert decode_message(encode_response(5, handle, 10, 0, timing)) == (
        RESPONSE, 5, handle, 10, 0, *timing)
    assert decode_message(encode_no_response(5, timing)) == (NO_RESPONSE, 5, *timing)
    assert decode_message(encode_no_response(5)) == (NO_RESPONSE, 5)  # not counted
    for bad in ((RESPONSE, 5, handle, 10, 0, 1, 1.0, "x", 2.0),  # an instant not a float
                (RESPONSE, 5, handle, 10, 0, 1.5, 1.0, 1.5, 2.0),  # slots not an int
                (RESPONSE, 5, handle, 10, 0, 1, 1.0),  # part of it
                (NO_RESPONSE, 5, 1, 1.0, 2.0)):
        with pytest.raises(ChannelProtocolError):
            decode_message(msgpack.packb(bad))
