from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clients.fake_broker import FakeCluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(1)
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake broker received requests it could not serve"


@pytest.fixture
def cluster2() -> Iterator[FakeCluster]:
    c = FakeCluster(2)
    try:
        yield c
    finally:
        c.close()
    assert c.errors == [], "the fake broker received requests it could not serve"
