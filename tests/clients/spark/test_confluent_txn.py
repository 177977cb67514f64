"""librdkafka's errors become ours, so the transactional workload's outcome rules hold
for confluent-kafka's producer too."""

from __future__ import annotations

import pytest

from clients.producer.idempotence import ProducerFencedError
from clients.producer.transactions.state import TransactionAbortableError
from clients.protocol.errors import MiniKafkaError, RequestTimedOutError
from clients.workload.confluent_txn import translate

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.mark.parametrize(("flags", "expected"), [
    ({"fatal": True}, ProducerFencedError),
    ({"txn_requires_abort": True}, TransactionAbortableError),
    ({"retriable": True}, RequestTimedOutError),
    ({}, MiniKafkaError),
])
def test_kafka_exceptions_become_our_errors(flags: dict[str, bool],
                                            expected: type[MiniKafkaError]) -> None:
    error = confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED, "why", **flags)
    translated = translate(confluent_kafka.KafkaException(error))
    assert type(translated) is expected and "why" in str(translated)
