"""Hostile but decodable requests: every client-facing API, at every version we serve,
with random bodies (any counts, sizes, offsets, names and codes the schema allows).

A handler must never raise (the server would close the connection of a healthy client)
and whatever it answers must encode at the request's version.  Bodies come from
``tests.clients.protocol.strategies`` (the schema declarations); a standalone core with
a few topics and a loaded group coordinator serves them.  Two draws are tamed so a run
stays small: CreateTopics only validates, CreatePartitions asks for at most 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.handlers.dispatch import HANDLERS
from clients.protocol.api_keys import ApiKey
from clients.protocol.registry import APIS
from tests.broker.handlers.wire import CoreHarness, call, core_at
from tests.clients.protocol.strategies import body_strategy

CLIENT_APIS = sorted(k for k in HANDLERS if k != ApiKey.API_VERSIONS)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoreHarness]:
    # Handlers are called here without an event loop; the KIP-890 verification of a
    # transactional Produce/TxnOffsetCommit asks the coordinator asynchronously, so it is
    # off (tests/broker/txn and tests/broker/group cover it with a loop).
    with core_at(tmp_path_factory.mktemp("fuzz"), group_initial_rebalance_delay_ms=0,
                 transaction_partition_verification_enable=False) as h:
        h.create("t", 2)
        h.create("c", 1, cleanup_policy="compact")
        call(h.core, ApiKey.FIND_COORDINATOR, {"key": "g"}, 0)
        h.tick(times=5)
        yield h


def tame(api: int, body: dict[str, Any]) -> dict[str, Any]:
    if api == ApiKey.CREATE_TOPICS:
        body["validate_only"] = True
    if api == ApiKey.CREATE_PARTITIONS:
        for topic in body["topics"]:
            topic["count"] = min(topic["count"], 8)
    return body


@st.composite
def requests(draw: st.DrawFn) -> tuple[int, int, dict[str, Any]]:
    api = draw(st.sampled_from(CLIENT_APIS))
    version = draw(st.integers(APIS[api].min_version, APIS[api].max_version))
    body = draw(body_strategy(APIS[api].request, version))
    return api, version, tame(api, body)


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(request=requests())
def test_random_requests_are_answered_in_their_version(
        harness: CoreHarness, request: tuple[int, int, dict[str, Any]]) -> None:
    api, version, body = request
    answers = call(harness.core, api, body, version)  # raises if an answer cannot encode
    harness.tick(times=2)  # parked requests expire or complete: still encodable
    assert len(answers) <= 1 or api == ApiKey.JOIN_GROUP, answers


def test_every_client_api_is_fuzzed() -> None:
    assert {ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ApiKey.DELETE_RECORDS, ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CLUSTER,
            ApiKey.FETCH, ApiKey.PRODUCE} <= set(CLIENT_APIS)
