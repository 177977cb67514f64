"""A broker says what log recovery did, and which replicas lost acknowledged records."""

from __future__ import annotations

from pathlib import Path

import pytest

from clients.protocol.api_keys import ApiKey
from clients.protocol.topics import TopicPartition
from clients.records.record import build_batch
from storage.log_dirs import CLEAN_SHUTDOWN_MARKER
from tests.broker.handlers.wire import call1, core_at


def test_a_torn_tail_below_the_high_watermark_is_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "b0"
    with core_at(data) as h:
        h.create("t", 1)
        for i in range(5):
            answer = call1(h.core, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 1000, "topics": [
                {"name": "t", "partitions": [{"index": 0, "records": build_batch(
                    [(b"k", b"value-%d" % i, 5, ())])}]}]})
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert h.core.partitions[TopicPartition("t", 0)].high_watermark == 5
    # an unclean stop that tore the last batch: the HW checkpoint says 5, the log has 4
    (data / CLEAN_SHUTDOWN_MARKER).unlink()
    segment = next((data / "t-0").glob("*.log"))
    segment.write_bytes(segment.read_bytes()[:-10])
    with caplog.at_level("WARNING", logger="broker.core"), core_at(data) as again:
        assert again.core.recovery.recovery_losses == {TopicPartition("t", 0): (4, 5)}
        dirs = call1(again.core, ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})
        (replica,) = dirs["results"][0]["topics"][0]["partitions"]
        assert (replica["recovery_cut"], replica["damaged_from"]) == (True, -1)  # status
    assert "t-0: recovery cut" in caplog.text
    assert "lost acknowledged records [4, 5)" in caplog.text


def test_a_clean_restart_reports_nothing(tmp_path: Path) -> None:
    with core_at(tmp_path / "b0") as h:
        h.create("t", 1)
    with core_at(tmp_path / "b0") as again:
        assert again.core.recovery.recovery_losses == {}
