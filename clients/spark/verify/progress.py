"""Progress of the Spark jobs of ``minikafka verify``, printed while they run.

:class:`ProgressReporter` reads Spark's status tracker (``sc.statusTracker()``: the
active stages, each with its task counts) and writes one line such as::

    verify: stage 4: 7/12 tasks done, 2 running; stage 5: 0/2 tasks done

to its output (stderr in the CLI) when the line differs from the last one written, at
most once per ``interval_s`` (1 s).  ``with reporting_progress(spark, out):`` runs it on a
daemon thread for the duration of the block; :meth:`ProgressReporter.tick` is one
look-and-write step (what the thread calls; tests call it directly with a fake tracker).

Contract: never raises into the job: a tracker or output failure (the JVM going away at
the end, a closed pipe) ends the reporting silently.  Costs: one status-tracker call per
active stage per interval (py4j round trips on the driver); O(active stages) memory.
Thread safety: the reporter's state is touched by its one thread only (``tick`` is not
for concurrent use); ``stop`` may be called from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ProgressReporter", "progress_line", "reporting_progress"]


class StageInfo(Protocol):
    """What is read of pyspark's ``SparkStageInfo``."""

    @property
    def stageId(self) -> int: ...

    @property
    def numTasks(self) -> int: ...

    @property
    def numActiveTasks(self) -> int: ...

    @property
    def numCompletedTasks(self) -> int: ...


class StatusTracker(Protocol):
    """What is used of pyspark's ``StatusTracker``."""

    def getActiveStageIds(self) -> list[int]: ...

    def getStageInfo(self, stageId: int) -> StageInfo | None: ...


def progress_line(stages: list[StageInfo], label: str = "verify") -> str | None:
    """One line for the active stages (None when there are none)."""
    if not stages:
        return None
    parts = []
    for s in sorted(stages, key=lambda s: s.stageId):
        text = f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks done"
        if s.numActiveTasks:
            text += f", {s.numActiveTasks} running"
        parts.append(text)
    return f"{label}: " + "; ".join(parts)


class ProgressReporter:
    """Writes :func:`progress_line` of ``tracker`` to ``out`` (see the module docstring)."""

    def __init__(self, tracker: StatusTracker, out: TextIO, *, interval_s: float = 1.0,
                 label: str = "verify") -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.tracker = tracker
        self.out = out
        self.interval_s = interval_s
        self.label = label
        self._last: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> str | None:
        """Look at the active stages once; write and return the line if it changed."""
        stages = [info for sid in self.tracker.getActiveStageIds()
                  if (info := self.tracker.getStageInfo(sid)) is not None]  # fmt: skip
        line = progress_line(stages, self.label)
        if line is None or line == self._last:
            return None
        self._last = line
        print(line, file=self.out, flush=True)
        return line

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # the JVM stopping, a closed pipe: reporting just ends
                return

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="verify-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@contextmanager
def reporting_progress(spark: SparkSession, out: TextIO, *, interval_s: float = 1.0
                       ) -> Iterator[ProgressReporter]:
    """Report the progress of ``spark``'s jobs to ``out`` while the block runs."""
    reporter = ProgressReporter(spark.sparkContext.statusTracker(), out, interval_s=interval_s)
    reporter.start()
    try:
        yield reporter
    finally:
        reporter.stop()
