"""Kafka's request-time histograms of a broker, kept in a table its network processes share.

Every request of a broker passes through two processes: a network process reads the frame
and writes the answer, the main process handles it (docs/architecture.md).  Kafka's
``kafka.network`` RequestMetrics split a request's time into phases; here they come from
six instants, stamped by the process that sees each (``time.monotonic()``: Linux's
``CLOCK_MONOTONIC``, one clock for every process of the machine, so instants taken in two
processes compare):

| instant         | where                                                              |
|-----------------|--------------------------------------------------------------------|
| ``read_at``     | network: the frame is complete and handed to the channel (the      |
|                 | loop iteration's time)                                             |
| ``dequeued_at`` | main: taken off the channel, before the header is decoded          |
| ``local_at``    | main: the handler returned (or answered, if it answered at once)   |
| ``responded_at``| main: the answer is made (``respond``), before it is encoded       |
| ``answered_at`` | network: the RESPONSE / NO_RESPONSE arrived (the loop iteration's  |
|                 | time)                                                              |
| ``sent_at``     | network: the answer's last byte is written (no answer: answered_at)|

and the phases (:data:`PHASES`, Kafka's names) are ``RequestQueueTimeMs`` = dequeued -
read (waiting in the channel and the main loop), ``LocalTimeMs`` = local - dequeued (the
handler), ``RemoteTimeMs`` = responded - local (a purgatory: acks=all, a Fetch's
``max_wait_ms``, a Produce checked on the record-check thread), ``ResponseQueueTimeMs`` =
answered - responded (encoding, waiting for pool memory, the channel), ``ResponseSendTimeMs``
= sent - answered (writing, ``sendfile`` included, and waiting for the client to read) and
``TotalTimeMs`` = sent - read.  The main process passes its three instants and the
request's slots with the answer (RESPONSE / NO_RESPONSE, :mod:`broker.network.channel.codec`);
the network process adds its own and records all six phases of the request at once, so
every phase counts the same requests and ``requests_total`` is ``TotalTimeMs``' count.

Where the counts live and why.  One :class:`RequestTimesTable` per broker: a ``memfd``
created by the supervisor, inherited by every network process (``--request-times-fd``),
one region per process index; each network process adds to its region in place
(:class:`RequestTimesWriter`), the main process sums the regions on a scrape
(:meth:`RequestTimesTable.totals`).  No message per request and none per interval, nothing
on disk, and a restarted network process goes on adding to its index's region, so the
counters never go back.  prometheus_client's multiprocess mode was the alternative: it
keeps a file per process and metric in a directory (``PROMETHEUS_MULTIPROC_DIR``, set
before import in every process), needs its files of dead processes marked and cleaned,
takes a lock per observation and merges the files on every scrape; our processes are
few, fixed in number and restarted by index, which a fixed table fits.

Format: little-endian signed 64-bit words; per process index, per slot (:data:`SLOTS`:
the API keys, then ``FetchConsumer``, ``FetchFollower``), per phase, ``len(BUCKETS_MS)
+ 1`` bucket counts (the last one ``+Inf``) then the sum in microseconds.  A request's
slots travel as one int, :func:`pack_slots` (API key | extra slot << 8).  One writer per
region; the reader takes no lock: an aligned 8-byte store is not torn, and a scrape
that lands between a bucket's and a sum's update is off by one request for one scrape
(the count is the buckets' sum, so it always matches the ``+Inf`` bucket).

Each phase is recorded in whole microseconds (truncated; the bucket bounds are whole
microseconds too).  Costs: :meth:`RequestTimesWriter.record` is 6 bisects over 16 bounds
and 12 word increments (24 for a Fetch, counted twice), about 1.5 us of the network
process (about one msgpack encode and decode of the RESPONSE message); memory
``SLOTS x 6 x 18 x 8`` bytes (60 KB) per network process.  :meth:`RequestTimesTable.totals`
reads the table once (O(processes x slots x 108) ints).  Thread-safety: one thread per
process; process-safety as above.
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_left

from clients.protocol.api_keys import ApiKey

__all__ = ["BUCKETS_MS", "FETCH_CONSUMER", "FETCH_FOLLOWER", "PHASES", "SLOTS",
           "RequestTimesTable", "RequestTimesWriter", "fetch_slot", "kafka_request_name",
           "pack_slots", "slot_names"]  # fmt: skip

# latency bucket bounds, ms (the last bucket, +Inf, is implicit)
BUCKETS_MS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
              2500.0, 5000.0, 10000.0, 30000.0)
PHASES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseQueueTimeMs",
          "ResponseSendTimeMs", "TotalTimeMs")
_API_SLOTS = max(ApiKey) + 1
FETCH_CONSUMER = _API_SLOTS  # extra slots: a Fetch counted again by who sent it
FETCH_FOLLOWER = _API_SLOTS + 1
SLOTS = _API_SLOTS + 2
_PHASE_WORDS = len(BUCKETS_MS) + 2  # buckets (+Inf last), then the sum in us
_SUM = len(BUCKETS_MS) + 1
_SLOT_WORDS = len(PHASES) * _PHASE_WORDS
_REGION_WORDS = SLOTS * _SLOT_WORDS
_WORD = 8
_BUCKETS_US = tuple(round(bound * 1000) for bound in BUCKETS_MS)  # recorded in whole us


def kafka_request_name(api_key: int) -> str:
    """Kafka's name of an API (``API_VERSIONS`` -> ``ApiVersions``)."""
    return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))


def slot_names() -> list[str]:
    """The metric label of every slot ("" for an API key no API has)."""
    return [kafka_request_name(k) if k in ApiKey._value2member_map_ else ""
            for k in range(_API_SLOTS)] + ["FetchConsumer", "FetchFollower"]


_NAMED = [bool(name) for name in slot_names()]


def fetch_slot(replica_id: int) -> int:
    """The extra slot of a Fetch: from a follower (``replica_id >= 0``) or a consumer."""
    return FETCH_FOLLOWER if replica_id >= 0 else FETCH_CONSUMER


def pack_slots(api_key: int, extra_slot: int = -1) -> int:
    """A request's slots as one int for the channel: ``api_key``, and ``extra_slot``
    (:func:`fetch_slot`) when it is counted twice."""
    return api_key | (extra_slot << 8 if extra_slot > 0 else 0)


class RequestTimesTable:
    """The shared table of one broker's network processes (see the module docstring)."""

    def __init__(self, fd: int, processes: int) -> None:
        if processes <= 0:
            raise ValueError(f"processes must be positive, got {processes}")
        self._fd = fd
        self.processes = processes
        self._map = mmap.mmap(fd, processes * _REGION_WORDS * _WORD)
        self._words = memoryview(self._map).cast("q")

    @classmethod
    def create(cls, processes: int) -> RequestTimesTable:
        """A new zeroed table (supervisor side); pass its fd down with ``pass_fds``."""
        fd = os.memfd_create("minikafka-request-times")  # close-on-exec: pass_fds only
        try:
            os.ftruncate(fd, max(1, processes) * _REGION_WORDS * _WORD)
            return cls(fd, processes)
        except BaseException:
            os.close(fd)
            raise

    def fileno(self) -> int:
        return self._fd

    def writer(self, index: int) -> RequestTimesWriter:
        """The writer of network process ``index``'s region."""
        if not 0 <= index < self.processes:
            raise ValueError(f"index {index} outside 0..{self.processes - 1}")
        return RequestTimesWriter(self._words, index * _REGION_WORDS)

    def totals(self) -> list[list[tuple[list[int], float]] | None]:
        """Per slot (None for a slot no request was counted in), per phase (in
        :data:`PHASES` order): the bucket counts (not cumulative, ``+Inf`` last) and
        the sum in ms, summed over every network process."""
        words = self._words.tolist()
        out: list[list[tuple[list[int], float]] | None] = []
        for slot in range(SLOTS):
            phases: list[tuple[list[int], float]] = []
            for phase in range(len(PHASES)):
                buckets = [0] * (len(BUCKETS_MS) + 1)
                sum_us = 0
                for process in range(self.processes):
                    at = process * _REGION_WORDS + slot * _SLOT_WORDS + phase * _PHASE_WORDS
                    region = words[at:at + _PHASE_WORDS]
                    buckets = [a + b for a, b in zip(buckets, region, strict=False)]
                    sum_us += region[_SUM]
                phases.append((buckets, sum_us / 1000.0))
            out.append(phases if sum(phases[-1][0]) else None)
        return out

    def close(self) -> None:
        self._words.release()
        self._map.close()
        os.close(self._fd)


class RequestTimesWriter:
    """One network process's region of the table: :meth:`record` adds one request."""

    def __init__(self, words: memoryview, base: int) -> None:
        self._words = words
        self._base = base

    def record(self, slots: int, read_at: float, dequeued_at: float, local_at: float,
               responded_at: float, answered_at: float, sent_at: float) -> None:
        """Count one answered request in every phase (the instants: module docstring).
        ``slots`` from :func:`pack_slots`; slots no API has are ignored, and a negative
        phase (a clock step cannot happen with CLOCK_MONOTONIC; a bad peer could) counts
        as 0."""
        api, extra = slots & 0xFF, slots >> 8
        if not (0 <= api < _API_SLOTS and _NAMED[api] and extra in (0, FETCH_CONSUMER,
                                                                     FETCH_FOLLOWER)):
            return
        words, bounds = self._words, _BUCKETS_US
        gaps = [int(seconds * 1e6) if seconds > 0.0 else 0 for seconds in (
            dequeued_at - read_at, local_at - dequeued_at, responded_at - local_at,
            answered_at - responded_at, sent_at - answered_at, sent_at - read_at)]
        for slot in (api, extra) if extra else (api,):
            at = self._base + slot * _SLOT_WORDS
            for us in gaps:
                words[at + bisect_left(bounds, us)] += 1
                words[at + _SUM] += us
                at += _PHASE_WORDS
