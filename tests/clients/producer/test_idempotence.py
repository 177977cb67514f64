"""IdempotenceManager alone: sequences, in-flight gating, error classification, bumps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.network.connection import NetworkError
from clients.producer.idempotence import (
    SEQUENCE_MODULUS,
    Action,
    IdempotenceManager,
    IdempotenceUnsupportedError,
    ProducerFencedError,
    increment_sequence,
)
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def error(code: ErrorCode) -> MiniKafkaError:
    return MiniKafkaError("test", code)


def ready_manager(max_in_flight: int = 5) -> IdempotenceManager:
    m = IdempotenceManager(max_in_flight)
    m.set_producer_id(1000, 0)
    return m


def test_nothing_is_sent_before_a_producer_id() -> None:
    m = IdempotenceManager()
    assert m.needs_producer_id and not m.ready
    assert not m.can_send(T0, head_has_sequence=False)
    assert m.init_request() == {"producer_id": -1, "producer_epoch": -1}
    m.set_producer_id(1000, 0)
    assert m.ready and not m.needs_producer_id and m.epoch_bumps == 0
    assert m.can_send(T0, head_has_sequence=False)
    with pytest.raises(MiniKafkaError):
        m.set_producer_id(-1, 0)
    with pytest.raises(ValueError):
        IdempotenceManager(6)


def test_sequences_follow_record_counts_per_partition_and_wrap() -> None:
    m = ready_manager()
    assert [m.assign_sequence(T0, n) for n in (3, 1, 10)] == [0, 3, 4]
    assert m.assign_sequence(T1, 2) == 0  # each partition has its own sequence
    assert increment_sequence(SEQUENCE_MODULUS - 2, 5) == 3
    with pytest.raises(ValueError):
        m.assign_sequence(T0, 0)


def test_at_most_max_in_flight_new_batches_per_partition() -> None:
    m = ready_manager(max_in_flight=5)
    for _ in range(5):
        assert m.can_send(T0, head_has_sequence=False)
        m.assign_sequence(T0, 1)
        m.on_send(T0)
    assert not m.can_send(T0, head_has_sequence=False)
    assert m.can_send(T1, head_has_sequence=False)  # other partitions unaffected
    assert m.in_flight_total == 5
    m.on_attempt_done(T0)
    assert m.can_send(T0, head_has_sequence=False) and m.in_flight_total == 4


def test_retries_go_alone_and_hold_back_new_batches() -> None:
    m = ready_manager()
    seqs = []
    for _ in range(3):
        seqs.append(m.assign_sequence(T0, 1))
        m.on_send(T0)
    m.on_attempt_done(T0)  # seq 0 failed retriably
    m.on_retry(T0, seqs[0])
    assert not m.can_send(T0, head_has_sequence=True)  # 1 and 2 still in flight
    assert not m.can_send(T0, head_has_sequence=False)  # no new batch while retrying
    m.on_attempt_done(T0)
    m.on_attempt_done(T0)
    assert m.can_send(T0, head_has_sequence=True)
    m.on_send(T0)  # the retry of seq 0
    m.on_attempt_done(T0)
    m.on_acked(T0, seqs[0], 10, 1, retried=True)
    assert m.can_send(T0, head_has_sequence=False)


def test_classify_sequence_errors_retry_while_an_earlier_batch_is_unresolved() -> None:
    m = ready_manager()
    a, b = m.assign_sequence(T0, 1), m.assign_sequence(T0, 1)
    ooo = error(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert m.classify(T0, b, ooo) is Action.RETRY  # a not resolved: the gap is ours
    assert m.bump_reason is None
    m.on_acked(T0, a, 0, 1, retried=False)
    assert m.classify(T0, b, ooo) is Action.BUMP_EPOCH  # nothing earlier: broker lost us
    assert m.bump_reason is not None and "OUT_OF_ORDER" in m.bump_reason
    assert not m.ready and not m.can_send(T1, head_has_sequence=False)


def test_unknown_producer_id_for_the_first_unresolved_batch_bumps() -> None:
    m = ready_manager()
    s = m.assign_sequence(T0, 4)
    m.on_send(T0)
    assert m.classify(T0, s, error(ErrorCode.UNKNOWN_PRODUCER_ID)) is Action.BUMP_EPOCH
    assert not m.needs_producer_id  # waits for the attempt in flight
    m.on_attempt_done(T0)
    assert m.needs_producer_id
    assert m.init_request() == {"producer_id": 1000, "producer_epoch": 0}
    m.set_producer_id(1000, 1)
    assert m.ready and m.epoch_bumps == 1 and m.producer_epoch == 1
    assert m.assign_sequence(T0, 1) == 0  # sequences restart under the new epoch


def test_classify_fatal_retriable_and_other_errors() -> None:
    m = ready_manager()
    s = m.assign_sequence(T0, 1)
    assert m.classify(T0, s, error(ErrorCode.INVALID_PRODUCER_EPOCH)) is Action.FATAL
    assert m.classify(T0, s, error(ErrorCode.PRODUCER_FENCED)) is Action.FATAL
    assert m.classify(T0, s, error(ErrorCode.NOT_LEADER_OR_FOLLOWER)) is Action.RETRY
    assert m.classify(T0, s, NetworkError("lost")) is Action.RETRY
    assert m.classify(T0, s, error(ErrorCode.MESSAGE_TOO_LARGE)) is Action.FAIL
    assert m.bump_reason is None
    m.set_fatal(error(ErrorCode.INVALID_PRODUCER_EPOCH))
    assert not m.ready and not m.needs_producer_id
    m.request_epoch_bump("ignored once fatal")
    assert m.bump_reason is None


def test_a_failed_sequenced_batch_leaves_a_gap_and_bumps() -> None:
    m = ready_manager()
    s = m.assign_sequence(T0, 1)
    m.on_failed(T1, 0, "unknown partition: ignored")
    assert m.bump_reason is None
    m.on_failed(T0, s, "expired")
    assert m.bump_reason is not None and "expired" in m.bump_reason
    state = m.partition(T0)
    assert state is not None and not state.unresolved


def test_duplicates_recognised_from_offsets_below_the_acked_end() -> None:
    m = ready_manager()
    a, b = m.assign_sequence(T0, 2), m.assign_sequence(T0, 3)
    m.on_acked(T0, b, 2, 3, retried=False)  # b acked first (a's response was lost)
    assert m.on_acked(T0, a, 0, 2, retried=True)  # answered with its original offset
    assert m.duplicates == 1
    c = m.assign_sequence(T0, 1)
    assert not m.on_acked(T0, c, 5, 1, retried=True)  # a retry appended for the first time
    assert m.metrics()["duplicates"] == 1


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=30),
    start=st.integers(0, SEQUENCE_MODULUS - 1),
)
def test_sequences_are_contiguous_modulo_2_31(counts: list[int], start: int) -> None:
    m = ready_manager()
    state = m.partition(T0) or m._state(T0)
    state.next_sequence = start
    expected = start
    for n in counts:
        assert m.assign_sequence(T0, n) == expected
        expected = (expected + n) % SEQUENCE_MODULUS
    assert state.unresolved[0] == start and len(state.unresolved) == len(counts)


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["send", "done", "ack", "retry"]),
                              st.sampled_from([T0, T1])), max_size=60))  # fmt: skip
def test_in_flight_counts_never_negative_and_bounded(
    ops: list[tuple[str, TopicPartition]],
) -> None:
    m = ready_manager(max_in_flight=3)
    sent: dict[TopicPartition, list[int]] = {T0: [], T1: []}
    for op, tp in ops:
        state = m.partition(tp)
        if op == "send" and m.can_send(tp, head_has_sequence=False):
            sent[tp].append(m.assign_sequence(tp, 1))
            m.on_send(tp)
        elif op == "done":
            m.on_attempt_done(tp)
        elif op == "ack" and sent[tp]:
            m.on_acked(tp, sent[tp].pop(0), 0, 1, retried=False)
        elif op == "retry" and sent[tp]:
            m.on_retry(tp, sent[tp][0])
        state = m.partition(tp)
        if state is not None:
            assert 0 <= state.in_flight <= 3
    total = sum(s.in_flight for s in (m.partition(T0), m.partition(T1)) if s is not None)
    assert m.in_flight_total == total


def test_api_versions_without_init_producer_id_is_fatal() -> None:
    m = IdempotenceManager()
    m.on_api_versions({22: (0, 5), 0: (3, 12)}, "h:1")
    assert m.fatal_error is None
    m.on_api_versions({0: (3, 12)}, "h:1")
    assert isinstance(m.fatal_error, IdempotenceUnsupportedError)
    assert "enable_idempotence=False" in str(m.fatal_error) and "h:1" in str(m.fatal_error)


def test_api_versions_without_a_common_init_producer_id_version_is_fatal() -> None:
    m = IdempotenceManager()
    m.on_api_versions({22: (6, 9)}, "h:2")  # a future broker that dropped our versions
    assert isinstance(m.fatal_error, IdempotenceUnsupportedError)
    assert "v6-9" in str(m.fatal_error)


def test_init_producer_id_answers() -> None:
    m = IdempotenceManager()
    retry = {"error_code": int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), "producer_id": -1,
             "producer_epoch": -1}  # fmt: skip
    assert m.on_init_response(retry) and m.fatal_error is None
    assert not m.on_init_response({"error_code": 0, "producer_id": 7, "producer_epoch": 3})
    assert (m.producer_id, m.producer_epoch) == (7, 3) and m.ready
    fenced = {"error_code": int(ErrorCode.INVALID_PRODUCER_EPOCH), "producer_id": -1,
              "producer_epoch": -1, "error_message": "stale"}  # fmt: skip
    assert not m.on_init_response(fenced)
    assert isinstance(m.fatal_error, ProducerFencedError) and "stale" in str(m.fatal_error)
    other = IdempotenceManager()
    other.on_init_response({"error_code": int(ErrorCode.INVALID_REQUEST), "producer_id": -1,
                            "producer_epoch": -1})  # fmt: skip
    assert other.fatal_error is not None and other.fatal_error.code == ErrorCode.INVALID_REQUEST
