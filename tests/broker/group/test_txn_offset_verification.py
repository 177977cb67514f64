"""TxnOffsetCommit through the handlers of a standalone core: KIP-890's verification of
the group's offsets partition with the transaction coordinator (a fake verifier), the
offsets pending until WriteTxnMarkers' COMMIT, the verifier's answers mapped as
Kafka maps them for an offset commit, and Kafka's ACLs (Write on the TransactionalId,
Read on the group, Read on each topic)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.acls import Authorizer, edit_acls
from broker.coordination.placement import partition_for
from broker.handlers.common import RequestContext
from broker.handlers.dispatch import HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from tests.broker.handlers.test_partition_txns import FakeVerifier, write_markers
from tests.broker.handlers.wire import CoreHarness, call, call1, core_at

GROUP = "g"
PID = 7


@pytest.fixture
def h(tmp_path: Path) -> Iterator[CoreHarness]:
    with core_at(tmp_path, group_initial_rebalance_delay_ms=0) as harness:
        harness.create("t", 1)
        call(harness.core, ApiKey.FIND_COORDINATOR, {"key": GROUP}, 0)  # creates the topic
        harness.tick(times=5)  # loads its partitions
        yield harness


def offsets_partition(h: CoreHarness) -> TopicPartition:
    count = h.core.groups.num_partitions()
    return TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, count))


def txn_offset_commit(h: CoreHarness, offset: int, epoch: int = 0,
                      version: int | None = None, topics: tuple[str, ...] = ("t",),
                      ctx: RequestContext | None = None) -> list[int]:
    body = {"transactional_id": "tx", "group_id": GROUP, "producer_id": PID,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": name, "partitions": [
                {"partition_index": 0, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": None}]}
                for name in topics]}

    async def run() -> list[Any]:
        if ctx is None:
            answers = call(h.core, ApiKey.TXN_OFFSET_COMMIT, body, version)
        else:  # a decoded body, as the handler gets it, under the context's login
            answers = []
            HANDLERS[ApiKey.TXN_OFFSET_COMMIT](h.core, body, answers.append, ctx)
        for _ in range(50):
            if answers:
                break
            await asyncio.sleep(0)
        return answers

    answers = asyncio.run(run())
    assert len(answers) == 1, answers
    return [p["error_code"] for t in answers[0]["topics"] for p in t["partitions"]]


def committed(h: CoreHarness, require_stable: bool = True) -> tuple[int, int]:
    answer = call1(h.core, ApiKey.OFFSET_FETCH, {"require_stable": require_stable, "groups": [
        {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    part = answer["groups"][0]["topics"][0]["partitions"][0]
    return part["error_code"], part["committed_offset"]


def test_the_offsets_partition_is_verified_before_the_first_commit_of_a_transaction(
        h: CoreHarness) -> None:
    verifier = FakeVerifier(ErrorCode.NONE)
    h.core.txn_verifier = verifier
    tp = offsets_partition(h)
    assert txn_offset_commit(h, 42) == [0]
    assert verifier.asked == [("tx", PID, 0, [tp])]
    assert txn_offset_commit(h, 43) == [0]  # the transaction is open there: no new check
    assert len(verifier.asked) == 1
    assert committed(h) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert write_markers(h, PID, True, (tp.topic, tp.partition)) == [0]
    assert committed(h) == (0, 43)
    assert txn_offset_commit(h, 44) == [0]  # the next transaction is verified again
    assert len(verifier.asked) == 2


@pytest.mark.parametrize(("answer", "version", "expected"), [
    (ErrorCode.INVALID_TXN_STATE, 4, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.TRANSACTION_ABORTABLE, 4, ErrorCode.TRANSACTION_ABORTABLE),
    (ErrorCode.TRANSACTION_ABORTABLE, 3, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.PRODUCER_FENCED, 4, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.NOT_COORDINATOR, 4, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ErrorCode.CONCURRENT_TRANSACTIONS, 0, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (ConnectionError("coordinator gone"), 4, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
])
def test_a_refused_verification_writes_nothing(h: CoreHarness, answer: ErrorCode | Exception,
                                               version: int, expected: ErrorCode) -> None:
    h.core.txn_verifier = FakeVerifier(answer)
    partition = h.core.partitions[offsets_partition(h)]
    end = partition.log_end_offset
    assert txn_offset_commit(h, 42, version=version) == [expected]
    assert partition.log_end_offset == end
    assert committed(h) == (0, -1)  # nothing pending


def test_without_a_verifier_the_commit_is_written_at_once(h: CoreHarness) -> None:
    h.core.txn_verifier = None  # transaction_partition_verification_enable=false
    assert txn_offset_commit(h, 42) == [0]
    assert committed(h) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    assert committed(h, require_stable=False) == (0, -1)


def test_a_commit_needs_write_on_the_transactional_id_then_the_group_then_each_topic(
        h: CoreHarness, tmp_path: Path) -> None:
    h.core.txn_verifier = None
    acls = tmp_path / "acls.txt"
    edit_acls(acls, add=["User:alice", "Allow", "Read", "Group", GROUP])
    edit_acls(acls, add=["User:alice", "Allow", "Read", "Topic", "t"])
    ctx = RequestContext(4, "c", principal="alice", authorizer=Authorizer(True, str(acls)))
    partition = h.core.partitions[offsets_partition(h)]
    end = partition.log_end_offset
    assert txn_offset_commit(h, 42, topics=("t", "u"), ctx=ctx) == [
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    assert partition.log_end_offset == end
    edit_acls(acls, add=["User:alice", "Allow", "Write", "TransactionalId", "tx"])
    edit_acls(acls, remove=["User:alice", "Allow", "Read", "Group", GROUP])
    ctx = RequestContext(4, "c", principal="alice", authorizer=Authorizer(True, str(acls)))
    assert txn_offset_commit(h, 42, topics=("t", "u"), ctx=ctx) == [
        ErrorCode.GROUP_AUTHORIZATION_FAILED] * 2
    assert partition.log_end_offset == end
    edit_acls(acls, add=["User:alice", "Allow", "Read", "Group", GROUP])
    ctx = RequestContext(4, "c", principal="alice", authorizer=Authorizer(True, str(acls)))
    assert txn_offset_commit(h, 42, topics=("t", "u"), ctx=ctx) == [
        0, ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    assert committed(h, require_stable=False) == (0, -1)  # pending in the transaction
    assert partition.log_end_offset > end
