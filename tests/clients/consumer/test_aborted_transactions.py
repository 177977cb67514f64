"""read_committed: which fetched batches are handed out (Kafka's aborted-transactions
filter, clients/consumer/aborted_transactions.py), on hand-built batches, and the
consumer's records and positions over such a log (fake broker)."""

from __future__ import annotations

import time

from clients.consumer.aborted_transactions import deliverable
from clients.consumer.consumer import Consumer
from clients.protocol.topics import TopicPartition
from clients.records.batch import TRANSACTIONAL_MASK, iter_batches
from clients.records.control import ControlType, build_marker_batch
from clients.records.record import build_batch
from tests.clients.producer.fake_txn_coordinator import FakeTxnCluster

T0 = TopicPartition("t", 0)


def data(offset: int, pid: int, *values: bytes, transactional: bool = True) -> bytes:
    return build_batch([(None, v, 0, ()) for v in values], base_offset=offset,
                       producer_id=pid, producer_epoch=0, base_sequence=offset,
                       attributes=TRANSACTIONAL_MASK if transactional else 0)  # fmt: skip


def marker(offset: int, pid: int, kind: ControlType) -> bytes:
    raw = bytearray(build_marker_batch(pid, 0, kind, 3, 0))
    raw[0:8] = offset.to_bytes(8, "big")  # the CRC does not cover the base offset
    return bytes(raw)


# offsets: 0-1 pid 1 (aborted), 2-3 pid 2 (committed), 4 plain, 5 ABORT pid 1,
# 6 COMMIT pid 2, 7 pid 1 again (a later transaction, committed at 8), 8 COMMIT pid 1,
# 9 pid 3 aborted with its marker at 10
LOG = [
    data(0, 1, b"a1", b"a2"), data(2, 2, b"c1", b"c2"), data(4, -1, b"p", transactional=False),
    marker(5, 1, ControlType.ABORT), marker(6, 2, ControlType.COMMIT), data(7, 1, b"c3"),
    marker(8, 1, ControlType.COMMIT), data(9, 3, b"a3"), marker(10, 3, ControlType.ABORT),
]  # fmt: skip
ABORTED = [(1, 0, 5), (3, 9, 10)]  # (producer_id, first_offset, last_offset)


def offsets_kept(buf: bytes, aborted: list[tuple[int, int]] | None) -> list[int]:
    view = memoryview(buf)
    positions = [pos for pos, _ in iter_batches(view)]
    kept = deliverable(view, positions, aborted)
    return [next(iter_batches(view[pos:]))[1].base_offset for pos in kept]


def test_read_committed_drops_aborted_data_and_markers() -> None:
    buf = b"".join(LOG)
    assert offsets_kept(buf, [(pid, first) for pid, first, _ in ABORTED]) == [2, 4, 7]


def test_read_uncommitted_keeps_all_data_but_never_markers() -> None:
    assert offsets_kept(b"".join(LOG), None) == [0, 2, 4, 7, 9]


def test_abort_marker_closes_the_aborted_transaction_of_its_producer_only() -> None:
    # pid 1's data after its ABORT marker belongs to a later transaction: kept; an
    # aborted list naming a producer whose data comes later opens only from first_offset
    assert offsets_kept(b"".join(LOG[:6]), [(1, 0)]) == [2, 4, 7]
    assert offsets_kept(b"".join(LOG), [(2, 2)]) == [0, 4, 7, 9]  # as if pid 2 aborted
    assert offsets_kept(b"".join(LOG), []) == [0, 2, 4, 7, 9]  # nothing aborted


def test_a_fetch_starting_inside_an_aborted_transaction() -> None:
    # the broker lists transactions whose range overlaps the fetch: first_offset may be
    # below the first batch returned
    assert offsets_kept(b"".join(LOG[1:]), [(1, 0), (3, 9)]) == [2, 4, 7]


def poll_until(consumer: Consumer, position: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 20
    while consumer.position(T0) < position:
        assert time.monotonic() < deadline, (out, consumer.position(T0))
        for records in consumer.poll(50).values():
            out += [(r.offset, r.value) for r in records]
    return out


def test_consumer_positions_move_past_markers_and_aborted_records() -> None:
    cluster = FakeTxnCluster(1)
    try:
        cluster.create_topic("t", 1)
        with cluster.cond:  # stored as written (offsets and producer fields kept)
            part = cluster.topics["t"][0]
            part.batches = list(LOG)
            part.log_end_offset = 11
            cluster.aborted[T0] = list(ABORTED)
        for level, expected in (("read_committed", [(2, b"c1"), (3, b"c2"), (4, b"p"),
                                                    (7, b"c3")]),
                                ("read_uncommitted", [(0, b"a1"), (1, b"a2"), (2, b"c1"),
                                                      (3, b"c2"), (4, b"p"), (7, b"c3"),
                                                      (9, b"a3")])):  # fmt: skip
            with Consumer(cluster.bootstrap, isolation_level=level, fetch_max_wait_ms=10,
                          auto_offset_reset="earliest") as consumer:  # fmt: skip
                consumer.assign([T0])
                assert poll_until(consumer, 11) == expected
                assert consumer.position(T0) == 11  # past the last marker
                assert consumer.poll(20) == {}
                # a fetch that starts past the aborted batch, at a marker
                consumer.seek(T0, 5)
                assert poll_until(consumer, 11) == [(7, b"c3")] + (
                    [(9, b"a3")] if level == "read_uncommitted" else [])
        assert set(cluster.fetch_isolation_levels) == {0, 1}
        assert cluster.errors == []
    finally:
        cluster.close()
