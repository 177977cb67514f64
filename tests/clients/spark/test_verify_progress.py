"""``minikafka verify``'s progress lines (:mod:`clients.spark.verify.progress`): from a
fake status tracker, and from the shared Spark session while a job is held running."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import NamedTuple

import pytest
from pyspark.sql import SparkSession

from clients.spark.verify.progress import ProgressReporter, progress_line, reporting_progress
from tests.broker.processes import wait_until

pytestmark = [pytest.mark.spark]


class Stage(NamedTuple):
    stageId: int
    numTasks: int
    numActiveTasks: int
    numCompletedTasks: int


class FakeTracker:
    def __init__(self) -> None:
        self.stages: dict[int, Stage] = {}

    def getActiveStageIds(self) -> list[int]:
        return list(self.stages)

    def getStageInfo(self, stageId: int) -> Stage | None:
        return self.stages.get(stageId)


def test_progress_line_names_each_active_stage() -> None:
    assert progress_line([]) is None
    assert progress_line([Stage(5, 2, 0, 0), Stage(4, 12, 2, 7)]) == (
        "verify: stage 4: 7/12 tasks done, 2 running; stage 5: 0/2 tasks done")


def test_a_line_is_written_only_when_progress_changed() -> None:
    tracker, out = FakeTracker(), io.StringIO()
    reporter = ProgressReporter(tracker, out)
    assert reporter.tick() is None  # nothing running: nothing written
    tracker.stages[1] = Stage(1, 4, 2, 1)
    assert reporter.tick() == "verify: stage 1: 1/4 tasks done, 2 running"
    assert reporter.tick() is None  # unchanged
    tracker.stages[1] = Stage(1, 4, 1, 3)
    reporter.tick()
    assert out.getvalue().splitlines() == ["verify: stage 1: 1/4 tasks done, 2 running",
                                           "verify: stage 1: 3/4 tasks done, 1 running"]
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        ProgressReporter(tracker, out, interval_s=0)


def test_the_thread_reports_and_stops_when_the_tracker_fails() -> None:
    tracker, out = FakeTracker(), io.StringIO()
    tracker.stages[2] = Stage(2, 3, 3, 0)
    reporter = ProgressReporter(tracker, out, interval_s=0.01)
    reporter.start()
    try:
        wait_until(lambda: "stage 2: 0/3" in out.getvalue(), 10, "a progress line")
        tracker.stages = None  # type: ignore[assignment]  # the JVM went away
        assert reporter._thread is not None
        reporter._thread.join(10)
        assert not reporter._thread.is_alive()  # ended quietly, never raised into the job
    finally:
        reporter.stop()


def _held_task(path: str, index: int) -> int:
    """A Spark task that runs until the test creates ``path`` (at most 60 s)."""
    import os
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return index


def test_progress_of_a_real_spark_job(spark: SparkSession, tmp_path: Path) -> None:
    release = str(tmp_path / "release")
    out = io.StringIO()
    result: list[int] = []
    with reporting_progress(spark, out, interval_s=0.2):
        job = threading.Thread(target=lambda: result.extend(
            spark.sparkContext.parallelize(range(2), 2)
            .map(lambda i: _held_task(release, i)).collect()))
        job.start()
        try:
            wait_until(lambda: "tasks done" in out.getvalue(), 60, "a progress line")
        finally:
            Path(release).touch()
            job.join(60)
    assert sorted(result) == [0, 1]
    assert out.getvalue().startswith("verify: stage ")
    assert "/2 tasks done" in out.getvalue()
