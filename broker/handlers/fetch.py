"""API handlers that read partitions: Fetch, ListOffsets, OffsetsForLeaderEpoch,
DescribeLogDirs.

Errors are per partition, so one bad partition never fails the others; every partition
a Fetch asks for is answered.  A Fetch that cannot be answered at once (fewer than
``min_bytes`` available, ``max_wait_ms`` > 0) parks in the fetch purgatory as a
:class:`~broker.delayed.DelayedFetch` and is read again when it completes.  Fetch
responses carry :class:`~broker.handlers.common.RegionRecords` (file regions sent by the
network process with ``sendfile``).

Kafka's semantics, with these differences:

- Fetch sessions (KIP-227, v7+, clients and followers alike): the request's
  ``session_id`` / ``session_epoch`` pick a context (:mod:`broker.fetch_sessions.context`:
  sessionless, full with a new session, incremental over the session's partitions, or
  FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH); the partitions read are the
  context's, each checked against the ACLs on every request, and an incremental response
  keeps only the partitions with news.  Sessions belong to the principal and replica id
  that made them.  ``rack_id`` is ignored; ``preferred_read_replica`` is always -1 (no
  fetching from followers).
- ``isolation_level`` 1 (read_committed) reads up to the last stable offset
  (:attr:`replication.partition.Partition.last_stable_offset`: below the first open
  transaction, at most the HW) and lists in ``aborted_transactions`` the aborted
  transactions the returned data overlaps (the ``.txnindex``, bounded by the end of the
  last segment read; an empty list without data); ``last_stable_offset`` is the LSO at
  every isolation level.
- ``last_fetched_epoch`` (v12): as Kafka, when the fetcher's last epoch is unknown to
  the leader or ends before ``fetch_offset``, the answer carries ``diverging_epoch``
  (the largest epoch <= the fetcher's and its end offset), no records, and a follower's
  fetch position is not recorded.
- ``current_leader`` (v12) on NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH from the
  image, with those leaders' ``node_endpoints`` from v16 (KIP-951).  v13+ names topics
  by id (:mod:`broker.fetch_sessions.topic_ids`); v15+ ``replica_state`` gives
  ``replica_id``, its epoch and v17's ``replica_directory_id`` are not checked.
- A negative ``max_bytes`` or ``partition_max_bytes``: INVALID_FETCH_SIZE per partition.
- ListOffsets: -1 latest (consumers: the HW, read_committed: the LSO, which also bounds
  timestamp lookups; a replica id >= 0: the log end, as Kafka), -2 earliest (and -4,
  v8+: the log is all local), -3 the largest timestamp (below the HW; every version),
  -5 (v9+) offset -1 (no tiered storage), other negative timestamps INVALID_REQUEST; a
  leader whose epoch's first offset is not committed yet answers OFFSET_NOT_AVAILABLE;
  ``leader_epoch`` is the epoch of the batch found (the current epoch for -1).
- DescribeLogDirs: one log dir (the data directory) with Kafka's fields and our tagged
  extras per partition; ``total_bytes`` / ``usable_bytes`` from the file system.

Costs: fetch is one index lookup per partition (and again when a parked fetch
completes), read ``FETCH_SLICE_PARTITIONS`` partitions per event-loop turn (work split,
:func:`run_in_slices`; the partition count itself is bounded by ``max_fetch_partitions``
before decoding, :mod:`broker.network.request_bounds`), so no Fetch holds the loop more
than a slice; the response carries at most ``min(max_bytes, fetch_max_bytes)`` record
bytes (first batch excepted, Kafka's rule); ListOffsets by timestamp is one time-index
lookup per partition, -3 a walk of the batch headers of the segments whose max timestamp
can win; DescribeLogDirs is O(partitions · log partitions) (sorted).
Thread-safety: run on the broker's event loop thread only (they touch the broker's state).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Generator, Mapping
from typing import Any

from broker.acls import CLUSTER_RESOURCE
from broker.delayed import DelayedFetch
from broker.fetch_sessions.context import ERROR, FIRST_TOPIC_ID_VERSION, new_context
from broker.fetch_sessions.topic_ids import topic_name
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import (
    EMPTY_RECORDS,
    Handler,
    RegionRecords,
    RequestContext,
    as_minikafka_error,
    error_fields,
    require,
    serves,
)
from broker.metadata.leader_hints import current_leader, leader_endpoints
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, OffsetOutOfRangeError
from clients.protocol.message_types import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponsePartition,
    DescribeLogDirsResponseResult,
    FetchRequest,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponse,
    FetchResponseDivergingEpoch,
    FetchResponsePartition,
    FetchResponseResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsResponsePartition,
    ListOffsetsResponseTopic,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    OffsetsForLeaderEpochResponsePartition,
    OffsetsForLeaderEpochResponseTopic,
)
from clients.protocol.offset_specs import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from clients.protocol.topics import ZERO_UUID, TopicPartition
from clients.records.record import decode_batch
from replication.partition import Partition
from storage.log.reader import FetchDataInfo

log = logging.getLogger(__name__)

READ_COMMITTED = 1
FIRST_REPLICA_STATE_VERSION = 15  # Fetch carries the follower's id in replica_state (KIP-903)
LEADER_HINT_ERRORS = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH))


def _error_topic(topic: FetchRequestTopic, code: int) -> FetchResponseResponse:
    """Every partition of ``topic`` answered ``code``, nothing read."""
    return {"name": topic.get("name", ""), "topic_id": topic.get("topic_id", ZERO_UUID),
            "partitions": [{"partition_index": p["partition"], "error_code": code,
                            "high_watermark": -1, "last_stable_offset": -1,
                            "log_start_offset": -1, "aborted_transactions": None,
                            "preferred_read_replica": -1, "records": EMPTY_RECORDS}
                           for p in topic["partitions"]]}


# -- Fetch ---------------------------------------------------------------------------


def _diverging(partition: Partition, request: FetchRequestPartition
               ) -> FetchResponseDivergingEpoch | None:
    """Kafka's check of ``last_fetched_epoch``: the diverging epoch, or None."""
    last_epoch = request["last_fetched_epoch"]
    if last_epoch < 0:
        return None
    answer = partition.last_offset_for_leader_epoch(request["current_leader_epoch"],
                                                    last_epoch)
    if answer.leader_epoch < 0 or answer.end_offset < 0:
        raise OffsetOutOfRangeError(f"{partition.topic}-{partition.index}: the end of "
                                    f"epoch {last_epoch} is unknown")
    if request["fetch_offset"] < partition.log_start_offset:
        raise OffsetOutOfRangeError(f"{partition.topic}-{partition.index}: fetch offset "
                                    f"{request['fetch_offset']} is below the log start "
                                    f"offset {partition.log_start_offset}")
    if answer.leader_epoch < last_epoch or answer.end_offset < request["fetch_offset"]:
        return {"epoch": answer.leader_epoch, "end_offset": answer.end_offset}
    return None


def _read(partition: Partition, fetch_offset: int, max_bytes: int, for_follower: bool,
          min_one_batch: bool, committed: bool) -> FetchDataInfo:
    """The partition's read for a follower, a consumer, or a read_committed consumer."""
    if committed and not for_follower:
        return partition.read_records(fetch_offset, max_bytes, for_follower=False,
                                      min_one_batch=min_one_batch, read_committed=True)
    return partition.read_records(fetch_offset, max_bytes, for_follower=for_follower,
                                  min_one_batch=min_one_batch)


def _read_partition(core: HandlerCore, name: str, request: FetchRequestPartition,
                    replica_id: int, max_bytes: int, committed: bool, min_one_batch: bool = True,
                    ctx: RequestContext | None = None
                    ) -> tuple[FetchResponsePartition, FetchDataInfo | None]:
    index = request["partition"]
    result: FetchResponsePartition = {
        "partition_index": index, "error_code": 0, "high_watermark": -1,
        "last_stable_offset": -1, "log_start_offset": -1,
        "aborted_transactions": [] if committed else None, "preferred_read_replica": -1}
    try:
        if replica_id < 0 and ctx is not None:
            require(ctx, "Read", "Topic", name)
        if max_bytes < 0:
            raise MiniKafkaError(f"partition_max_bytes {max_bytes} is negative",
                                 ErrorCode.INVALID_FETCH_SIZE)
        partition = core.partition_or_error(name, index)
        partition.check_leader_epoch(request["current_leader_epoch"])
        diverging = _diverging(partition, request)
        if diverging is not None:
            data = None
            result["diverging_epoch"] = diverging
        else:
            data = _read(partition, request["fetch_offset"], max_bytes, replica_id >= 0,
                         min_one_batch, committed)
            if replica_id >= 0:
                if partition.update_follower_fetch(replica_id, request["fetch_offset"],
                                                   core.clock.now_ms()):
                    core.wake_partition(TopicPartition(name, index))
                if (request["fetch_offset"] < partition.high_watermark
                        and replica_id in partition.isr):  # an ISR member lost committed data
                    core.isr.check_isr_of(TopicPartition(name, index))
                core.isr.maybe_expand_isr(TopicPartition(name, index), replica_id)
    except Exception as exc:
        result.update(error_fields(as_minikafka_error(exc)))
        if result["error_code"] in LEADER_HINT_ERRORS:
            result["current_leader"] = current_leader(core.image, name, index)
        return result, None
    result["high_watermark"] = partition.high_watermark
    result["last_stable_offset"] = lso = partition.last_stable_offset
    result["log_start_offset"] = partition.log_start_offset
    if committed and data is not None and replica_id < 0:
        result["aborted_transactions"] = [
            {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in partition.partition_log.aborted_transactions(request["fetch_offset"],
                                                                    data, lso)]
    return result, data


FetchResult = tuple[FetchResponse, int, bool]  # (response body, record bytes, any partition error)
FETCH_SLICE_PARTITIONS = 100  # partitions read per event-loop turn (~1-2 ms)


def _fetch_steps(core: HandlerCore, body: FetchRequest, ctx: RequestContext | None = None,
                 by_id: bool = False) -> Generator[None, None, FetchResult]:
    """Read every partition, yielding after each ``FETCH_SLICE_PARTITIONS`` (work split:
    :func:`run_in_slices` reads one slice per event-loop turn, so a Fetch of
    ``max_fetch_partitions`` partitions never holds the loop more than a slice's time).

    Size (Kafka's rule): at most ``min(max_bytes, fetch_max_bytes)`` bytes of records in
    all, each partition at most its ``partition_max_bytes``; only until some partition
    returned records is a first batch larger than the limit returned whole (so a
    consumer always progresses), never afterwards.
    """
    remaining = min(body["max_bytes"], core.config.fetch_max_bytes)
    committed = body["isolation_level"] == READ_COMMITTED
    total = 0
    errored = False
    responses: list[FetchResponseResponse] = []
    read = 0
    for topic in body["topics"]:
        name, code = topic_name(core.image, core.hosted_topic_uuids, topic, by_id)
        if code:
            responses.append(_error_topic(topic, code))
            errored = True
            continue
        parts: list[FetchResponsePartition] = []
        for request in topic["partitions"]:
            read += 1
            if read % FETCH_SLICE_PARTITIONS == 0:
                yield
            limit = request["partition_max_bytes"]
            if body["max_bytes"] < 0:
                limit = body["max_bytes"]
            elif limit >= 0:
                limit = max(0, min(limit, remaining))
            result, data = _read_partition(core, name, request, body["replica_id"],
                                           limit, committed, min_one_batch=total == 0,
                                           ctx=ctx)
            if data is None:
                errored = errored or result["error_code"] != 0 or "diverging_epoch" in result
                result["records"] = EMPTY_RECORDS
            else:
                result["records"] = RegionRecords(data.regions, data.size_in_bytes)
                total += data.size_in_bytes
                remaining = max(0, remaining - data.size_in_bytes)
            parts.append(result)
        responses.append({"name": name, "topic_id": topic["topic_id"], "partitions": parts}
                         if by_id else {"name": name, "partitions": parts})
    response: FetchResponse = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                               "responses": responses}
    if errored and by_id and core.image is not None:  # v16+ carries them (KIP-951)
        response["node_endpoints"] = leader_endpoints(core.image, {
            leader["leader_id"] for t in responses for p in t["partitions"]
            if (leader := p.get("current_leader"))})
    return response, total, errored


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
    _Slices(steps, done, fail, loop).step(True)


class _Slices:
    """The run of :func:`run_in_slices`: a bound method schedules the next slice, so
    nothing refers back to itself (a nested function that schedules itself would be a
    reference cycle holding the whole fetch - its generator, the response, the file
    regions - until the cyclic collector runs; this is freed at its last slice)."""

    __slots__ = ("done", "fail", "loop", "steps")

    def __init__(self, steps: Generator[None, None, FetchResult],
                 done: Callable[[FetchResult], None], fail: Callable[[], None],
                 loop: asyncio.AbstractEventLoop | None) -> None:
        self.steps, self.done, self.fail, self.loop = steps, done, fail, loop

    def step(self, first: bool) -> None:
        try:
            while True:
                next(self.steps)
                if self.loop is not None:
                    self.loop.call_soon(self.step, False)
                    return
        except StopIteration as stop:
            self.done(stop.value)
        except Exception:
            if first:
                raise  # the dispatcher answers the error
            log.exception("fetch failed in a later slice")
            self.fail()


def replica_id_of(body: Mapping[str, Any], version: int) -> int:
    """The fetcher's replica id (-1: a consumer); from v15 ``replica_state``'s."""
    state = body.get("replica_state") if version >= FIRST_REPLICA_STATE_VERSION else body
    return -1 if state is None else int(state["replica_id"])


def handle_fetch(core: HandlerCore, body: FetchRequest, respond: Respond[FetchResponse],
                 ctx: RequestContext) -> None:
    if ctx.version >= FIRST_REPLICA_STATE_VERSION:
        body["replica_id"] = replica_id_of(body, ctx.version)
    by_id = ctx.version >= FIRST_TOPIC_ID_VERSION
    if body["replica_id"] >= 0 and not ctx.may_act_as_broker(body["replica_id"]):
        respond(_not_a_broker(body, body["replica_id"]))  # a client posing as a follower
        return
    context = new_context(core.fetch_sessions, body, ctx.version,
                          (ctx.principal, body["replica_id"]))
    if context.kind == ERROR:
        respond(context.finish({}))
        return
    read = body.copy()  # what this fetch reads: the context's partitions
    read["topics"] = context.topics

    def fail() -> None:
        respond({"throttle_time_ms": 0, "session_id": 0, "responses": [],
                 "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR)})

    def first_read(result: FetchResult) -> None:
        response, total, errored = result
        max_wait_ms = min(max(body["max_wait_ms"], 0), core.config.max_fetch_wait_ms)
        keys = [(t["name"], p["partition_index"]) for t in response["responses"]
                for p in t["partitions"]]
        if errored or total >= body["min_bytes"] or max_wait_ms == 0 or not keys:
            respond(context.finish(response))
            return
        op = DelayedFetch(max_wait_ms, body["min_bytes"], available, complete)
        core.fetch_purgatory.try_complete_else_watch(op, keys)

    def available() -> int | None:
        _, now_total, now_errored = _fetch_response_sizes(core, read, by_id)
        return None if now_errored else now_total

    def complete() -> None:
        run_in_slices(_fetch_steps(core, read, ctx, by_id),
                      lambda result: respond(context.finish(result[0])), fail)

    run_in_slices(_fetch_steps(core, read, ctx, by_id), first_read, fail)


def _not_a_broker(body: FetchRequest, replica_id: int) -> FetchResponse:
    """CLUSTER_AUTHORIZATION_FAILED for every partition: a Fetch as ``replica_id`` from a
    connection that did not log in as that broker (no follower state moves)."""
    code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)  # (a Fetch has no error_message)
    log.warning("refused a Fetch as replica %d from a connection not logged in as it",
                replica_id)
    return {"throttle_time_ms": 0, "session_id": 0, "error_code": code,
            "responses": [_error_topic(t, code) for t in body["topics"]]}


def _fetch_response_sizes(core: HandlerCore, body: FetchRequest,
                          by_id: bool = False) -> tuple[None, int, bool]:
    """How many bytes a fetch would return now (no follower-state side effects).

    "Errored" (complete the parked fetch now; the fresh read at completion reports the
    precise per-partition code) when a partition is gone (deleted, or moved off this
    broker: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER), is no longer led
    here (NOT_LEADER_OR_FOLLOWER), has a leader epoch other than the request's
    (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), or cannot be read.  Never raises:
    this runs inside ``check_and_complete`` of whatever woke the partition (a
    producer's or follower's request), which must not fail because of this fetch.

    A follower's partition below its LEO, with no damaged range marked on the leader,
    counts as one byte without a read when one byte is all the fetch still needs (issue
    36: a follower's parked fetch was read twice, here and at completion, on the acks=all
    path of every append).
    """
    total = 0
    for topic in body["topics"]:
        name, code = topic_name(core.image, core.hosted_topic_uuids, topic, by_id)
        if code:
            return None, 0, True
        for request in topic["partitions"]:
            partition = core.partitions.get(TopicPartition(name, request["partition"]))
            if partition is None or not partition.is_leader:
                return None, 0, True
            epoch = request["current_leader_epoch"]
            if epoch >= 0 and epoch != partition.leader_epoch:
                return None, 0, True
            committed = body["isolation_level"] == READ_COMMITTED
            upper = (partition.log_end_offset if body["replica_id"] >= 0
                     else partition.last_stable_offset if committed
                     else partition.high_watermark)
            if request["fetch_offset"] >= upper:
                continue
            if (body["replica_id"] >= 0 and total + 1 >= body["min_bytes"]
                    and not partition.damage.ranges):
                # a follower reads up to the LEO and the batch holding LEO - 1 is in the
                # log, so its read returns a batch or fails: enough, without reading it
                # here (Kafka's DelayedFetch counts log positions and reads nothing)
                return None, total + 1, False
            try:
                data = _read(partition, request["fetch_offset"], request["partition_max_bytes"],
                             body["replica_id"] >= 0, True, committed)
            except Exception:
                return None, 0, True
            total += data.size_in_bytes
            if total >= body["min_bytes"]:
                return None, total, False  # enough: the rest is read once, at completion
    return None, total, False


# -- ListOffsets ---------------------------------------------------------------------


def _batch_max(seg: Any, batch: Any, low: int, upper: int) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first record with the largest timestamp among the
    batch's records in ``[low, upper)``."""
    best: tuple[int, int] | None = None
    for record in decode_batch(seg.read_bytes(batch.position, batch.size), validate=False):
        if low <= record.offset < upper and (best is None or record.timestamp > best[0]):
            best = (record.timestamp, record.offset)
    return best


def _max_timestamp(partition: Partition, upper: int) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record with the largest timestamp in
    ``[log start, upper)``; None when there is no record.  Segments are visited by
    decreasing max timestamp (an upper bound of what they hold in range) until none can
    win; whole batches in range are judged by their header, the batches that straddle
    the range by their records."""
    low = partition.log_start_offset
    best: tuple[int, int] | None = None  # timestamp, offset
    for seg in sorted(partition.log.segments, key=lambda s: -s.max_timestamp):
        if best is not None and seg.max_timestamp < best[0]:
            break
        if not seg.size or seg.base_offset >= upper:
            continue
        for batch in seg.iter_batches(0):
            if batch.base_offset >= upper:
                break
            if batch.last_offset < low or (best is not None
                                           and batch.max_timestamp < best[0]):
                continue
            if batch.base_offset >= low and batch.last_offset < upper:
                found: tuple[int, int] | None = (batch.max_timestamp, batch.base_offset)
            else:
                found = _batch_max(seg, batch, low, upper)
            if found is not None and (best is None or found[0] > best[0]
                                      or (found[0] == best[0] and found[1] < best[1])):
                best = found
    if best is None:
        return None
    timestamp = best[0]
    for seg in partition.log.segments:  # the record itself: decode the winning batch
        winner = seg.find_batch(best[1])
        if winner is not None:
            exact = _batch_max(seg, winner, max(low, best[1]), upper)
            if exact is not None and exact[0] == timestamp:
                return exact[1], exact[0]
            break
    return best[1], timestamp


def _list_offset(partition: Partition, timestamp: int, replica_id: int,
                 result: ListOffsetsResponsePartition, committed: bool = False,
                 version: int = 7) -> None:
    consumer = replica_id == -1
    upper = ((partition.last_stable_offset if committed else partition.high_watermark)
             if consumer else partition.log_end_offset)
    epochs = partition.leader_epoch_cache
    if timestamp == LATEST_TIERED_TIMESTAMP and version >= 9:
        return  # no tiered storage: offset -1 (Kafka's answer without remote storage)
    if timestamp == EARLIEST_TIMESTAMP or (timestamp == EARLIEST_LOCAL_TIMESTAMP
                                           and version >= 8):  # all of the log is local
        result["offset"] = partition.log_start_offset
        result["leader_epoch"] = epochs.epoch_for_offset(partition.log_start_offset)
        return
    if timestamp < 0 and timestamp not in (LATEST_TIMESTAMP, MAX_TIMESTAMP):
        raise MiniKafkaError(f"timestamp {timestamp} is not -1, -2, -3 or >= 0",
                             ErrorCode.INVALID_REQUEST)
    epoch_start = partition.leader_epoch_start_offset
    if consumer and epoch_start > partition.high_watermark:
        raise MiniKafkaError(f"{partition.topic}-{partition.index}: the high watermark has "
                             f"not reached the start of leader epoch {partition.leader_epoch}",
                             ErrorCode.OFFSET_NOT_AVAILABLE)
    if timestamp == LATEST_TIMESTAMP:
        result["offset"], result["leader_epoch"] = upper, partition.leader_epoch
        return
    found = (_max_timestamp(partition, upper) if timestamp == MAX_TIMESTAMP
             else partition.log.offset_for_timestamp(timestamp))
    if found is not None and found[0] < upper:
        result["offset"], result["timestamp"] = found[0], found[1]
        result["leader_epoch"] = epochs.epoch_for_offset(found[0])


def _replica_refusal(ctx: RequestContext, replica_id: int, api: str) -> MiniKafkaError | None:
    """The error for a request as follower ``replica_id`` (it sees the log end, above the
    HW) from a connection not logged in as that broker (logged once per request), or
    None when it may ask."""
    if replica_id < 0 or ctx.may_act_as_broker(replica_id):
        return None
    log.warning("refused a %s as replica %d from a connection not logged in as it",
                api, replica_id)
    return MiniKafkaError(f"only broker {replica_id} may ask as replica {replica_id}",
                          ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def handle_list_offsets(core: HandlerCore, body: ListOffsetsRequest,
                        respond: Respond[ListOffsetsResponse], ctx: RequestContext) -> None:
    refusal = _replica_refusal(ctx, body["replica_id"], "ListOffsets")
    topics: list[ListOffsetsResponseTopic] = []
    for topic in body["topics"]:
        parts: list[ListOffsetsResponsePartition] = []
        for request in topic["partitions"]:
            result: ListOffsetsResponsePartition = {
                "partition_index": request["partition_index"], "error_code": 0,
                "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                if refusal is not None:
                    raise refusal
                require(ctx, "Describe", "Topic", topic["name"])
                partition = core.partition_or_error(topic["name"], request["partition_index"])
                if body["replica_id"] != -2:  # -2 (debugging) may read a follower
                    partition.check_leader_epoch(request["current_leader_epoch"])
                    if not partition.is_leader:
                        raise MiniKafkaError(f"broker {core.config.node_id} is not the leader "
                                             f"of {topic['name']}-{partition.index}",
                                             ErrorCode.NOT_LEADER_OR_FOLLOWER)
                _list_offset(partition, request["timestamp"], body["replica_id"], result,
                             body["isolation_level"] == READ_COMMITTED, ctx.version)
            except Exception as exc:  # (ListOffsets has no error_message field)
                result["error_code"] = int(as_minikafka_error(exc).code)
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"throttle_time_ms": 0, "topics": topics})


# -- OffsetsForLeaderEpoch --------------------------------------------------------------


def handle_offsets_for_leader_epoch(core: HandlerCore, body: OffsetsForLeaderEpochRequest,
                                    respond: Respond[OffsetsForLeaderEpochResponse],
                                    ctx: RequestContext) -> None:
    refusal = _replica_refusal(ctx, body["replica_id"], "OffsetsForLeaderEpoch")
    topics: list[OffsetsForLeaderEpochResponseTopic] = []
    for topic in body["topics"]:
        parts: list[OffsetsForLeaderEpochResponsePartition] = []
        for request in topic["partitions"]:
            result: OffsetsForLeaderEpochResponsePartition = {
                "partition": request["partition"], "error_code": 0, "leader_epoch": -1,
                "end_offset": -1}
            try:
                if refusal is not None:
                    raise refusal
                require(ctx, "Describe", "Topic", topic["name"])
                partition = core.partition_or_error(topic["name"], request["partition"])
                answer = partition.last_offset_for_leader_epoch(
                    request["current_leader_epoch"], request["leader_epoch"])
                result["leader_epoch"], result["end_offset"] = (answer.leader_epoch,
                                                                answer.end_offset)
            except Exception as exc:  # (no error_message field)
                result["error_code"] = int(as_minikafka_error(exc).code)
            parts.append(result)
        topics.append({"name": topic["name"], "partitions": parts})
    respond({"throttle_time_ms": 0, "topics": topics})


# -- DescribeLogDirs -------------------------------------------------------------------


def handle_describe_log_dirs(core: HandlerCore, body: DescribeLogDirsRequest,
                             respond: Respond[DescribeLogDirsResponse],
                             ctx: RequestContext) -> None:
    if not ctx.allowed("Describe", "Cluster", CLUSTER_RESOURCE):  # ACLs (Kafka's rule)
        respond({"throttle_time_ms": 0, "results": [],
                 "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})
        return
    wanted = None if body["topics"] is None else {
        (t["name"], p) for t in body["topics"] for p in t["partitions"]}
    by_topic: dict[str, list[DescribeLogDirsResponsePartition]] = {}
    for (name, index), p in sorted(core.partitions.items()):
        if wanted is not None and (name, index) not in wanted:
            continue
        by_topic.setdefault(name, []).append({
            "partition_index": index, "size_bytes": p.log.size_in_bytes,
            "offset_lag": max(p.high_watermark - p.log_end_offset, 0), "is_future_key": False,
            "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset,
            "high_watermark": p.high_watermark, "leader_id": p.leader_id,
            "leader_epoch": p.leader_epoch, "isr": list(p.isr),
            # the partition's damage marks: the scrubber's findings and recovery's alike
            "damaged_from": p.damaged_ranges[0][0] if p.damaged_ranges else -1,
            "recovery_cut": TopicPartition(name, index) in core.recovery.recovery_cuts})
    log_dir = core.data_dir.resolve()
    result: DescribeLogDirsResponseResult = {
        "error_code": 0, "log_dir": str(log_dir), "total_bytes": -1, "usable_bytes": -1,
        "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}
    try:
        usage = shutil.disk_usage(log_dir)
        result.update({"total_bytes": usage.total, "usable_bytes": usage.free})
    except OSError as exc:  # (the result has no error_message field: the log says why)
        log.warning("DescribeLogDirs: cannot read the disk usage of %s: %s", log_dir, exc)
        result["error_code"] = int(ErrorCode.KAFKA_STORAGE_ERROR)
    respond({"throttle_time_ms": 0, "error_code": 0, "results": [result]})


FETCH_HANDLERS: dict[int, Handler] = {
    ApiKey.FETCH: serves(handle_fetch),
    ApiKey.LIST_OFFSETS: serves(handle_list_offsets),
    ApiKey.OFFSETS_FOR_LEADER_EPOCH: serves(handle_offsets_for_leader_epoch),
    ApiKey.DESCRIBE_LOG_DIRS: serves(handle_describe_log_dirs),
}
