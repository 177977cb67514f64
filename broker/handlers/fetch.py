"""The Fetch handler (ListOffsets, OffsetsForLeaderEpoch and DescribeLogDirs, which read
partitions too: :mod:`broker.handlers.log_queries`).

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

Costs: fetch is one index lookup per partition (and again when a parked fetch
completes), read ``FETCH_SLICE_PARTITIONS`` partitions per event-loop turn (work split,
:func:`run_in_slices`; the partition count itself is bounded by ``max_fetch_partitions``
before decoding, :mod:`broker.network.request_bounds`), so no Fetch holds the loop more
than a slice; the response carries at most ``min(max_bytes, fetch_max_bytes)`` record
bytes (first batch excepted, Kafka's rule).
Thread-safety: run on the broker's event loop thread only (they touch the broker's state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any

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
    FetchRequest,
    FetchRequestPartition,
    FetchRequestTopic,
    FetchResponse,
    FetchResponseDivergingEpoch,
    FetchResponsePartition,
    FetchResponseResponse,
)
from clients.protocol.topics import ZERO_UUID, TopicPartition
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


FETCH_HANDLERS: dict[int, Handler] = {
    ApiKey.FETCH: serves(handle_fetch),
}
