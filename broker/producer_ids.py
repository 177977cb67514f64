"""Producer ids for InitProducerId: unique in the cluster, across restarts of anything.

Ids are handed out from blocks of :data:`PRODUCER_ID_BLOCK_SIZE` (1000) consecutive ids;
a block is made durable *before* any of its ids is given out, so a crash can waste the
rest of a block but never hand an id out twice.

* **Standalone** (no controller): :class:`StandaloneProducerIdAllocator` keeps the start
  of the next block in ``<data_dir>/producer-id-block`` (the broker's data directory),
  rewritten with temp file + fsync + rename (:func:`storage.file_io.atomic_write_text`)
  before a block is used::

      line 1   "0"                 format version
      line 2   <next block start>  decimal int64 >= 0

  A missing file means "start at 0"; a malformed one makes every InitProducerId fail
  with KAFKA_STORAGE_ERROR naming the file (ids cannot be proven unique any more), the
  broker keeps serving everything else.
* **Controller mode**: :class:`ControllerProducerIdAllocator` asks the controller for
  blocks with AllocateProducerIds ``{broker_id, broker_epoch}`` (the controller appends
  and fsyncs a ``producer_ids`` metadata record before answering
  ``{producer_id_start, producer_id_len}``).  The next block is prefetched once 90% of
  the current one is used; at most one request is in flight.  When no id is at hand a
  caller waits up to its timeout; a failure (controller unreachable, broker not
  registered yet, STALE_BROKER_EPOCH) becomes COORDINATOR_LOAD_IN_PROGRESS (14,
  retriable), as in Kafka's RPCProducerIdManager.

Costs: O(1) per id; one fsync'd file write (standalone) or one controller round trip
(controller mode) per 1000 ids.  Not thread-safe: the broker's event loop owns both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from storage.file_io import atomic_write_text

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
BLOCK_FILE = "producer-id-block"
BLOCK_FILE_VERSION = 0
PREFETCH_RATIO = 0.9
RETRY_BACKOFF_MS = 100
ALLOCATE_TIMEOUT_MS = 5_000
_INT64_MAX = 2**63 - 1

BlockSource = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdAllocator(Protocol):
    def next_id_now(self) -> int | None:
        """An id now, or None when the caller must ``await next_id`` (controller mode)."""

    async def next_id(self, timeout_ms: int) -> int:
        """An id, waiting up to ``timeout_ms`` for a block; raises MiniKafkaError."""


def _storage_error(message: str) -> MiniKafkaError:
    return MiniKafkaError(message, ErrorCode.KAFKA_STORAGE_ERROR)


class StandaloneProducerIdAllocator:
    """Blocks reserved in ``<data_dir>/producer-id-block`` (see the module docstring)."""

    def __init__(self, data_dir: str | Path, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.path = Path(data_dir) / BLOCK_FILE
        self.block_size = block_size
        self._next = 0
        self._end = 0  # ids in [_next, _end) are reserved on disk and unused

    def _read_next_block_start(self) -> int:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return 0
        except (OSError, UnicodeDecodeError) as exc:
            raise _storage_error(f"{self.path}: cannot be read: {exc}") from None
        lines = text.split("\n")
        if len(lines) != 3 or lines[2] != "" or lines[0] != str(BLOCK_FILE_VERSION):
            raise _storage_error(f"{self.path}: expected version {BLOCK_FILE_VERSION} and "
                                 f"one number on two lines, got {text[:60]!r}")
        if not lines[1].isascii() or not lines[1].isdigit() or int(lines[1]) > _INT64_MAX:
            raise _storage_error(f"{self.path}: line 2: next block start {lines[1][:30]!r} "
                                 "is not an int64 >= 0")
        return int(lines[1])

    def next_id_now(self) -> int:
        if self._next >= self._end:
            start = max(self._end, self._read_next_block_start())
            end = start + self.block_size
            if end > _INT64_MAX:
                raise MiniKafkaError("producer ids are exhausted", ErrorCode.UNKNOWN_SERVER_ERROR)
            try:
                atomic_write_text(self.path, f"{BLOCK_FILE_VERSION}\n{end}\n")
            except OSError as exc:
                raise _storage_error(f"{self.path}: cannot reserve a producer id block: "
                                     f"{exc}") from None
            self._next, self._end = start, end
            log.info("producer ids %d..%d reserved in %s", start, end - 1, self.path)
        producer_id = self._next
        self._next += 1
        return producer_id

    async def next_id(self, timeout_ms: int) -> int:
        return self.next_id_now()


class ControllerProducerIdAllocator:
    """Blocks from the controller's AllocateProducerIds (see the module docstring)."""

    def __init__(self, request_block: BlockSource, *, prefetch_ratio: float = PREFETCH_RATIO,
                 retry_backoff_ms: int = RETRY_BACKOFF_MS) -> None:
        if not 0 < prefetch_ratio <= 1:
            raise ValueError(f"prefetch_ratio must be in (0, 1], got {prefetch_ratio}")
        self._request_block = request_block
        self.prefetch_ratio = prefetch_ratio
        self.retry_backoff_ms = retry_backoff_ms
        self._next = self._end = self._start = 0  # current block [_start, _end)
        self._prefetched: tuple[int, int] | None = None
        self._fetch: asyncio.Task[tuple[int, int]] | None = None
        self.last_error: MiniKafkaError | None = None
        self.blocks_received = 0

    def _start_fetch(self) -> None:
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.get_running_loop().create_task(self._fetch_block())
            # the outcome is read by next_id or not at all: never "never retrieved"
            self._fetch.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _fetch_block(self) -> tuple[int, int]:
        try:
            start, length = await self._request_block()
        except MiniKafkaError as exc:
            self.last_error = exc
            log.info("no producer id block from the controller: %s", exc)
            raise
        if start < 0 or length < 1:
            self.last_error = MiniKafkaError(f"controller gave block start {start} length "
                                             f"{length}", ErrorCode.UNKNOWN_SERVER_ERROR)
            raise self.last_error
        self.blocks_received += 1
        self._prefetched = (start, start + length)
        return start, start + length

    def next_id_now(self) -> int | None:
        if self._next >= self._end:
            if self._prefetched is None:
                self._start_fetch()
                return None
            (self._start, self._end), self._prefetched = self._prefetched, None
            self._next = self._start
        producer_id = self._next
        self._next += 1
        used = self._next - self._start
        if (self._prefetched is None
                and used >= self.prefetch_ratio * (self._end - self._start)):
            self._start_fetch()
        return producer_id

    async def next_id(self, timeout_ms: int) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            producer_id = self.next_id_now()
            if producer_id is not None:
                return producer_id
            remaining = deadline - loop.time()
            fetch = self._fetch
            if remaining <= 0 or fetch is None:
                break
            done, _ = await asyncio.wait({fetch}, timeout=remaining)
            if done and fetch.exception() is not None:
                await asyncio.sleep(min(self.retry_backoff_ms / 1000,
                                        max(0.0, deadline - loop.time())))
        why = f": {self.last_error}" if self.last_error is not None else ""
        raise MiniKafkaError(f"no producer id block from the controller within "
                             f"{timeout_ms} ms{why}", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    async def close(self) -> None:
        if self._fetch is not None and not self._fetch.done():
            self._fetch.cancel()
            with contextlib.suppress(BaseException):
                await self._fetch


def controller_block_source(controller: Any, broker_id: int,
                            broker_epoch: Callable[[], int]) -> BlockSource:
    """AllocateProducerIds over ``controller`` (an AsyncConnection) for this broker."""

    async def request_block() -> tuple[int, int]:
        epoch = broker_epoch()
        if epoch < 0:
            raise MiniKafkaError("the broker is not registered with the controller yet",
                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        answer = await controller.request(ApiKey.ALLOCATE_PRODUCER_IDS,
                                          {"broker_id": broker_id, "broker_epoch": epoch},
                                          timeout_ms=ALLOCATE_TIMEOUT_MS)
        if answer["error_code"]:
            raise error_for(answer["error_code"],
                            f"controller: {answer.get('error_message') or ''}")
        return answer["producer_id_start"], answer["producer_id_len"]

    return request_block
