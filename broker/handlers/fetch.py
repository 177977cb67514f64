"""API handlers that read partitions: Fetch, ListOffsets, OffsetsForLeaderEpoch,
DescribeLogDirs.

Errors are per partition, so one bad partition never fails the others.  A Fetch that
cannot be answered at once (fewer than ``min_bytes`` available, ``max_wait_ms`` > 0)
parks in the fetch purgatory as a :class:`~broker.delayed.DelayedFetch` and is read
again when it completes.  Fetch responses carry
:class:`~broker.handlers.common.RegionRecords` (file regions sent by the network process
with ``sendfile``).

Costs: fetch is one index lookup per partition (and again when a parked fetch
completes), read ``FETCH_SLICE_PARTITIONS`` partitions per event-loop turn (work split,
:func:`run_in_slices`; the partition count itself is bounded by ``max_fetch_partitions``
before decoding, :mod:`broker.network.request_bounds`), so no Fetch holds the loop more
than a slice; the response carries at most ``min(max_bytes, fetch_max_bytes)`` record
bytes (first batch excepted, Kafka's rule); ListOffsets by timestamp is one time-index
lookup per partition;
DescribeLogDirs is O(partitions · log partitions) (sorted).
Thread-safety: run on the broker's event loop thread only (they touch BrokerCore state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator

from broker.core import BrokerCore
from broker.delayed import DelayedFetch
from broker.handlers.common import (
    EMPTY_RECORDS,
    Body,
    Handler,
    RegionRecords,
    Respond,
    as_minikafka_error,
    error_fields,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.topics import TopicPartition
from storage.log.reader import FetchDataInfo

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


# -- Fetch ---------------------------------------------------------------------------


def _read_partition(core: BrokerCore, name: str, request: Body, replica_id: int,
                    max_bytes: int, min_one_batch: bool = True,
                    ) -> tuple[Body, FetchDataInfo | None]:
    index = request["partition"]
    result: Body = {"partition_index": index, "error_code": 0, "error_message": None,
                    "high_watermark": -1, "log_start_offset": -1}
    try:
        partition = core.partition_or_error(name, index)
        partition.check_leader_epoch(request["current_leader_epoch"])
        data = partition.read_records(request["fetch_offset"], max_bytes,
                                      for_follower=replica_id >= 0, min_one_batch=min_one_batch)
        if replica_id >= 0:
            if partition.update_follower_fetch(replica_id, request["fetch_offset"],
                                               core.clock.now_ms()):
                core.wake_partition(TopicPartition(name, index))
            core.maybe_expand_isr(TopicPartition(name, index), replica_id)
    except Exception as exc:
        result.update(error_fields(as_minikafka_error(exc)))
        return result, None
    result["high_watermark"] = partition.high_watermark
    result["last_stable_offset"] = partition.high_watermark
    result["log_start_offset"] = partition.log_start_offset
    return result, data


FetchResult = tuple[Body, int, bool]  # (response body, record bytes, any partition error)
FETCH_SLICE_PARTITIONS = 100  # partitions read per event-loop turn (~1-2 ms)


def _fetch_steps(core: BrokerCore, body: Body) -> Generator[None, None, FetchResult]:
    """Read every partition, yielding after each ``FETCH_SLICE_PARTITIONS`` (work split:
    :func:`run_in_slices` reads one slice per event-loop turn, so a Fetch of
    ``max_fetch_partitions`` partitions never holds the loop more than a slice's time).

    Size (Kafka's rule): at most ``min(max_bytes, fetch_max_bytes)`` bytes of records in
    all, each partition at most its ``partition_max_bytes``; only until some partition
    returned records is a first batch larger than the limit returned whole (so a
    consumer always progresses), never afterwards.
    """
    remaining = min(body["max_bytes"], core.config.fetch_max_bytes)
    total = 0
    errored = False
    responses = []
    read = 0
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            read += 1
            if read % FETCH_SLICE_PARTITIONS == 0:
                yield
            limit = max(0, min(request["partition_max_bytes"], remaining))
            result, data = _read_partition(core, topic["name"], request, body["replica_id"],
                                           limit, min_one_batch=total == 0)
            if data is None:
                errored = errored or result["error_code"] != 0
                result["records"] = EMPTY_RECORDS
            else:
                result["records"] = RegionRecords(data.regions, data.size_in_bytes)
                total += data.size_in_bytes
                remaining = max(0, remaining - data.size_in_bytes)
            parts.append(result)
        responses.append({"name": topic["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "responses": responses}, total, errored


def run_in_slices(steps: Generator[None, None, FetchResult],
                  done: Callable[[FetchResult], None], fail: Callable[[], None]) -> None:
    """Run ``steps`` to its end, one slice now and each further one in a later turn of the
    running event loop (all at once when there is no loop, e.g. a handler driven directly
    by a test); then ``done(result)``.  An exception in a later slice calls ``fail``
    (the request must still be answered)."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None

    def step(first: bool) -> None:
        try:
            while True:
                next(steps)
                if loop is not None:
                    loop.call_soon(step, False)
                    return
        except StopIteration as stop:
            done(stop.value)
        except Exception:
            if first:
                raise  # the dispatcher answers the error
            log.exception("fetch failed in a later slice")
            fail()

    step(True)


def handle_fetch(core: BrokerCore, body: Body, respond: Respond) -> None:
    if body["max_bytes"] < 0 or any(p["partition_max_bytes"] < 0
                                    for t in body["topics"] for p in t["partitions"]):
        respond({"error_code": int(ErrorCode.INVALID_FETCH_SIZE), "responses": []})
        return

    def fail() -> None:
        respond({"throttle_time_ms": 0, "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                 "responses": []})

    def first_read(result: FetchResult) -> None:
        response, total, errored = result
        max_wait_ms = min(max(body["max_wait_ms"], 0), core.config.max_fetch_wait_ms)
        if errored or total >= body["min_bytes"] or max_wait_ms == 0 or not body["topics"]:
            respond(response)
            return
        keys = [(t["name"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
        op = DelayedFetch(max_wait_ms, body["min_bytes"], available, complete)
        core.fetch_purgatory.try_complete_else_watch(op, keys)

    def available() -> int | None:
        _, now_total, now_errored = _fetch_response_sizes(core, body)
        return None if now_errored else now_total

    def complete() -> None:
        run_in_slices(_fetch_steps(core, body), lambda result: respond(result[0]), fail)

    run_in_slices(_fetch_steps(core, body), first_read, fail)


def _fetch_response_sizes(core: BrokerCore, body: Body) -> tuple[None, int, bool]:
    """How many bytes a fetch would return now (no follower-state side effects).

    "Errored" (complete the parked fetch now; the fresh read at completion reports the
    precise per-partition code) when a partition is gone (deleted, or moved off this
    broker: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER), is no longer led
    here (NOT_LEADER_OR_FOLLOWER), has a leader epoch other than the request's
    (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), or cannot be read.  Never raises:
    this runs inside ``check_and_complete`` of whatever woke the partition (a
    producer's or follower's request), which must not fail because of this fetch.
    """
    total = 0
    for topic in body["topics"]:
        for request in topic["partitions"]:
            partition = core.partitions.get(TopicPartition(topic["name"], request["partition"]))
            if partition is None or not partition.is_leader:
                return None, 0, True
            epoch = request["current_leader_epoch"]
            if epoch >= 0 and epoch != partition.leader_epoch:
                return None, 0, True
            upper = (partition.log_end_offset if body["replica_id"] >= 0
                     else partition.high_watermark)
            if request["fetch_offset"] >= upper:
                continue
            try:
                data = partition.read_records(request["fetch_offset"],
                                              request["partition_max_bytes"],
                                              for_follower=body["replica_id"] >= 0)
            except Exception:
                return None, 0, True
            total += data.size_in_bytes
            if total >= body["min_bytes"]:
                return None, total, False  # enough: the rest is read once, at completion
    return None, total, False


# -- ListOffsets ---------------------------------------------------------------------


def handle_list_offsets(core: BrokerCore, body: Body, respond: Respond) -> None:
    topics = []
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            result: Body = {"partition_index": request["partition_index"], "error_code": 0,
                            "error_message": None, "timestamp": -1, "offset": -1}
            try:
                partition = core.partition_or_error(topic["name"], request["partition_index"])
                partition.check_leader_epoch(request["current_leader_epoch"])
                timestamp = request["timestamp"]
                if timestamp == LATEST_TIMESTAMP:
                    result["offset"] = partition.high_watermark
                elif timestamp == EARLIEST_TIMESTAMP:
                    result["offset"] = partition.log_start_offset
                elif timestamp < 0:
                    raise MiniKafkaError(f"timestamp {timestamp} is not -1, -2 or >= 0",
                                         ErrorCode.INVALID_REQUEST)
                else:
                    found = partition.log.offset_for_timestamp(timestamp)
                    if found is not None and found[0] < partition.high_watermark:
                        result["offset"], result["timestamp"] = found
                result["leader_epoch"] = partition.leader_epoch
            except Exception as exc:
                result.update(error_fields(as_minikafka_error(exc)))
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"topics": topics})


# -- OffsetsForLeaderEpoch --------------------------------------------------------------


def handle_offsets_for_leader_epoch(core: BrokerCore, body: Body, respond: Respond) -> None:
    topics = []
    for topic in body["topics"]:
        parts = []
        for request in topic["partitions"]:
            result: Body = {"partition": request["partition"], "error_code": 0,
                            "error_message": None, "leader_epoch": -1, "end_offset": -1}
            try:
                partition = core.partition_or_error(topic["name"], request["partition"])
                answer = partition.last_offset_for_leader_epoch(
                    request["current_leader_epoch"], request["leader_epoch"])
                result["leader_epoch"], result["end_offset"] = (answer.leader_epoch,
                                                                answer.end_offset)
            except Exception as exc:
                result.update(error_fields(as_minikafka_error(exc)))
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"topics": topics})


# -- DescribeLogDirs -------------------------------------------------------------------


def handle_describe_log_dirs(core: BrokerCore, body: Body, respond: Respond) -> None:
    wanted = None if body["topics"] is None else {
        (t["name"], p) for t in body["topics"] for p in t["partitions"]}
    by_topic: dict[str, list[Body]] = {}
    for (name, index), p in sorted(core.partitions.items()):
        if wanted is not None and (name, index) not in wanted:
            continue
        by_topic.setdefault(name, []).append({
            "partition_index": index, "error_code": 0,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "high_watermark": p.high_watermark, "size_bytes": p.log.size_in_bytes,
            "leader_id": p.leader_id, "leader_epoch": p.leader_epoch, "isr": list(p.isr)})
    respond({"error_code": 0, "log_dir": str(core.data_dir.resolve()),
             "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]})


FETCH_HANDLERS: dict[int, Handler] = {
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: handle_offsets_for_leader_epoch,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
}
