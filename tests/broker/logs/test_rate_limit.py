"""RateLimitedLog with an injected clock: a key's line at most once per interval, the
suppressed count on its next line, keys independent, the key table bounded."""

from __future__ import annotations

import logging

import pytest

from broker.logs.rate_limit import RateLimitedLog
from timer.clock import ManualClock

LOGGER = "tests.rate_limit"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    got = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    return got


def test_a_key_is_logged_once_per_interval_then_with_the_suppressed_count(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = ManualClock(0)
    limited = RateLimitedLog(logging.getLogger(LOGGER), clock, interval_ms=1_000)
    for _ in range(1_190):  # the AlterPartition storm after a restart, in one instant
        limited.info(("t", 0, "INELIGIBLE_REPLICA"), "t-0 refused: %s", "INELIGIBLE_REPLICA")
    assert lines(caplog) == ["t-0 refused: INELIGIBLE_REPLICA"]
    assert limited.suppressed_total == 1_189
    assert limited.info(("t", 1, "INELIGIBLE_REPLICA"), "t-1 refused")  # another key
    assert lines(caplog) == ["t-1 refused"]
    clock.advance(999)
    assert not limited.info(("t", 0, "INELIGIBLE_REPLICA"), "t-0 refused: %s", "x")
    assert lines(caplog) == []
    clock.advance(1)
    assert limited.info(("t", 0, "INELIGIBLE_REPLICA"), "t-0 refused: %s", "again")
    assert lines(caplog) == ["t-0 refused: again (1190 similar suppressed)"]
    clock.advance(1_000)  # nothing suppressed since: no count
    limited.warning(("t", 0, "INELIGIBLE_REPLICA"), "t-0 refused: %s", "later")
    assert lines(caplog) == ["t-0 refused: later"]


def test_the_key_table_is_bounded_least_recent_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = ManualClock(0)
    limited = RateLimitedLog(logging.getLogger(LOGGER), clock, interval_ms=1_000, max_keys=2)
    for key in ("a", "b", "c"):  # "a" is forgotten when "c" comes
        limited.info(key, "line %s", key)
    assert limited.info("a", "line %s", "a")  # forgotten: logged again at once
    assert not limited.info("c", "line %s", "c")
    assert lines(caplog) == ["line a", "line b", "line c", "line a"]
    with pytest.raises(ValueError):
        RateLimitedLog(logging.getLogger(LOGGER), clock, max_keys=0)


def test_a_disabled_level_is_neither_logged_nor_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    limited = RateLimitedLog(logging.getLogger(LOGGER), ManualClock(0))
    assert not limited.info("k", "quiet")
    assert limited.warning("k", "loud")
    assert lines(caplog) == ["loud"] and limited.suppressed_total == 0
