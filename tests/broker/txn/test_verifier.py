"""The KIP-890 verifier's client side: questions asked in one loop turn go to the
coordinator broker as one AddPartitionsToTxn v4 verify_only, merged per transactional
id; each question gets its own partitions' answers; a failed request answers
NETWORK_EXCEPTION."""

from __future__ import annotations

import asyncio
from typing import Any

from broker.txn.verifier import RemoteTxnVerifier
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode as E
from clients.protocol.errors import MiniKafkaError
from clients.protocol.topics import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


class FakeConnection:
    def __init__(self, fail: bool = False) -> None:
        self.requests: list[tuple[int, int, dict[str, Any]]] = []
        self.fail = fail

    async def request(self, api_key: int, body: dict[str, Any], *, api_version: int,
                      timeout_ms: int) -> dict[str, Any]:
        self.requests.append((api_key, api_version, body))
        if self.fail:
            raise MiniKafkaError("connection lost")
        return {"error_code": 0, "results_by_transaction": [
            {"transactional_id": t["transactional_id"], "topic_results": [
                {"name": topic["name"], "results_by_partition": [
                    {"partition_index": p,
                     "partition_error_code": 0 if topic["name"] == "a" else
                     int(E.TRANSACTION_ABORTABLE)} for p in topic["partitions"]]}
                for topic in t["topics"]]} for t in body["transactions"]]}


def verifier_with(conn: FakeConnection) -> RemoteTxnVerifier:
    verifier = RemoteTxnVerifier(0, None)
    verifier._connection = lambda node, endpoint: conn  # type: ignore[assignment,method-assign,return-value]
    return verifier


def test_questions_of_one_turn_share_one_request() -> None:
    conn = FakeConnection()
    verifier = verifier_with(conn)

    async def run() -> list[dict[TopicPartition, E]]:
        return list(await asyncio.gather(
            verifier.verify(2, ("h", 1), "tx", 7, 0, [A0]),
            verifier.verify(2, ("h", 1), "tx", 7, 0, [A1, B0]),
            verifier.verify(2, ("h", 1), "other", 9, 3, [B0])))

    first, second, third = asyncio.run(run())
    assert first == {A0: E.NONE}
    assert second == {A1: E.NONE, B0: E.TRANSACTION_ABORTABLE}
    assert third == {B0: E.TRANSACTION_ABORTABLE}
    assert len(conn.requests) == 1
    api, version, body = conn.requests[0]
    assert (api, version) == (ApiKey.ADD_PARTITIONS_TO_TXN, 4)
    assert [(t["transactional_id"], t["verify_only"],
             [(x["name"], x["partitions"]) for x in t["topics"]])
            for t in body["transactions"]] == [
        ("tx", True, [("a", [0, 1]), ("b", [0])]), ("other", True, [("b", [0])])]


def test_a_failed_request_answers_network_exception() -> None:
    verifier = verifier_with(FakeConnection(fail=True))
    answer = asyncio.run(verifier.verify(2, ("h", 1), "tx", 7, 0, [A0, B0]))
    assert answer == {A0: E.NETWORK_EXCEPTION, B0: E.NETWORK_EXCEPTION}
