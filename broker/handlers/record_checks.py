"""Where the leader's record checks of a Produce run: on the event loop while they are
small, on one worker thread beyond, so that no Produce holds the loop.

A leader parses every record of every produced batch before it appends
(:mod:`storage.log.validator`: decompression, the record check, record headers, keys of
compacted topics).  That work is bounded per request (:class:`CheckBudget`, from the
broker's config; over it: MESSAGE_TOO_LARGE) but not small: up to ``max_produce_records``
(1,048,576) records and headers and ``max_produce_decompressed_bytes`` (256 MiB)
inflated per request, about 1 us of Python per record or header on the slow paths
(headers, layouts that vary), so up to seconds of CPU.  The Produce handler
(:mod:`broker.handlers.produce`) runs :func:`run_checks` on the loop with the budget's
``inline_bytes`` share (``record_check_inline_bytes``, 64 KiB of records as sent plus
inflated: 11-14 ms measured in-process for the worst shapes, one record of 32,000
headers or ~1,000 one-record batches; a usual small Produce stays entirely on the loop,
as before);
when that share runs out (:class:`~storage.log.validator.CheckDeferred`) the rest of the
request's checks goes to the :class:`RecordCheckThread`, which hands the outcomes back to
the loop (``call_soon_threadsafe``) for the appends and the answer.

Why a thread is enough although the GIL is held by the Python parts of a check: the loop
thread takes the GIL back within the interpreter's switch interval (5 ms) whenever it has
work, so other clients' requests are served with a few milliseconds of extra latency
while a long check runs (``bench/produce_stall.py``: ApiVersions latency during the
attack), instead of waiting for the whole check; decompression (cramjam), CRC-32C and
numpy's vectorised parts release the GIL and run truly in parallel.  Checks run one at a
time, in arrival order: what one request may cost the thread is bounded by its budget,
and memory by one batch's inflated records at a time (``max_batch_decompressed_bytes``
plus O(records) of columns).  Requests waiting for the thread keep their frames in the
shared buffer pool (``RequestContext.keep_frame``), so the pool bounds them (and one
request at a time per connection, as always).

Thread-safety: :func:`run_checks` touches only its arguments (the checks are pure values,
the records a read-only view of the request's frame); :class:`RecordCheckThread` is
driven from the loop's thread and calls ``finish`` there.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clients.records.batch import Buffer
from storage.log.validator import BatchInfo, CheckBudget, CheckDeferred, LeaderCheck

log = logging.getLogger(__name__)

# One partition's check: its log's check (None: not led here, nothing to check: the
# append answers NOT_LEADER_OR_FOLLOWER) and the records of the request for it.
CheckJob = tuple[LeaderCheck | None, Buffer]
# Its outcome: what the append is handed (``checked``), the error, or None (unchecked).
CheckOutcome = list[BatchInfo] | Exception | None


def run_checks(jobs: Sequence[CheckJob], budget: CheckBudget,
               outcomes: list[CheckOutcome]) -> bool:
    """Check ``jobs`` from ``len(outcomes)`` on, appending each outcome, while the budget
    allows; True when all are done, False when the budget's ``inline_bytes`` ran out (the
    job at ``len(outcomes)`` is then to be checked again from its start: its charges are
    undone)."""
    for job in jobs[len(outcomes):]:
        check, records = job
        if check is None:
            outcomes.append(None)
            continue
        before = budget.copy()
        try:
            outcomes.append(check.run(records, budget))
        except CheckDeferred:
            budget.records, budget.decompressed_bytes = before.records, before.decompressed_bytes
            return False
        except Exception as exc:  # the partition's error (a bug: UNKNOWN_SERVER_ERROR)
            outcomes.append(exc)
    return True


@dataclass
class _Pending:
    jobs: Sequence[CheckJob]
    budget: CheckBudget
    outcomes: list[CheckOutcome]
    finish: Callable[[], None]


class RecordCheckThread:
    """One daemon thread that finishes the record checks the loop could not afford."""

    def __init__(self, inline_bytes: int) -> None:
        self.inline_bytes = inline_bytes  # each request's share of checks on the loop
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.checks_run = 0  # requests finished on the thread (tests, logs)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="record-checks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Drop the checks not started and wait for the one running (bounded by its
        request's budget): the frames it reads must outlive it."""
        if self._thread is None:
            return
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("the record-check thread did not stop within %.0f s", timeout_s)
        self._thread = None

    def submit(self, jobs: Sequence[CheckJob], budget: CheckBudget,
               outcomes: list[CheckOutcome], finish: Callable[[], None]) -> None:
        """Check the rest of ``jobs`` on the thread (no event-loop share left: the
        budget's ``inline_bytes`` is dropped), then call ``finish`` on the loop."""
        if self._thread is None:
            raise RuntimeError("the record-check thread is not running")
        budget.inline_bytes = None
        self._queue.put(_Pending(jobs, budget, outcomes, finish))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            run_checks(item.jobs, item.budget, item.outcomes)
            self.checks_run += 1
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(item.finish)
            except RuntimeError:  # the loop is closed: the broker is stopping
                return
