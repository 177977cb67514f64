"""Handler of Produce: validated appends as leader, answered by acks.

Per partition, in request order: the client may not write an internal topic
(INVALID_TOPIC_EXCEPTION, as Kafka; the coordinators append to theirs directly), the
partition must be hosted here and led here
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION otherwise); then every partition's
batches are checked (:meth:`storage.log.log.Log.leader_check`: framing, CRC, every record,
a compacted topic's keys (INVALID_RECORD, as in Kafka), within the broker's per-batch
bounds and one budget for the whole request: ``max_batch_records``,
``max_batch_decompressed_bytes``, ``max_produce_records``,
``max_produce_decompressed_bytes``; MESSAGE_TOO_LARGE past them, docs/security.md); then
each checked partition is appended
(:meth:`replication.partition.Partition.append_records_as_leader` with the check's result,
which also checks ``min_insync_replicas`` for acks=all).  The checks run here while they
stay within ``record_check_inline_bytes``; beyond, the rest runs on the record-check
thread (:mod:`broker.handlers.record_checks`) and the appends and the answer follow on
the loop when it is done (the request's frame is kept until then).  Errors are per
partition, so one bad partition never fails the others.  acks=0: no response (sent
once appended: it unmutes the connection); acks=1: answered once appended; acks=-1
(all): a :class:`~broker.delayed.DelayedProduce` waits in the produce purgatory until
the high watermark passes every appended batch (or ``timeout_ms``).  Other acks values:
INVALID_REQUIRED_ACKS for every partition.  Each append wakes the fetch purgatory of its
partition (followers and consumers may be waiting).

Kafka's answer at every served version: ``log_append_time_ms`` -1 (CreateTime: the
producer's timestamps are kept), ``log_start_offset`` (v5+), ``error_message`` (v8+; no
``record_errors``), and from v10 the ``current_leader`` hint of a partition answered
NOT_LEADER_OR_FOLLOWER with the leader's endpoint in ``node_endpoints`` (KIP-951, from the
metadata image).

Transactions: a request with a transactional batch (attribute bit 4) but without
``transactional_id``, or whose user may not Write that TransactionalId (ACLs), is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (Kafka's check); control
batches stay refused (INVALID_RECORD: only WriteTxnMarkers writes markers).  KIP-890
part 1: with a :class:`TxnVerifier` configured (``core.txn_verifier``), a producer's
transactional batch that would start a transaction on a partition (no transaction of
that producer and epoch open there) is appended only after the coordinator confirmed
the partition is in the producer's ongoing transaction: the leader takes the producer's
verification guard, asks the verifier once per request (the frame is kept meanwhile),
then appends with the guard (a marker written meanwhile drops it: INVALID_TXN_STATE).
The coordinator's answer becomes the partition's error as Kafka maps it
(:func:`verification_error`): a partition not in the transaction is INVALID_TXN_STATE,
or TRANSACTION_ABORTABLE from Produce v11 when the coordinator answers that; a
coordinator that cannot answer is NOT_ENOUGH_REPLICAS (retried by every client).
Without a verifier every transactional batch is accepted (the producer state's rules
still apply).

Costs: one record check per partition (on the loop at most
``record_check_inline_bytes`` of it, ~15 ms in the worst case, see
:mod:`broker.handlers.record_checks`), then one append per partition; a transactional
request also one verifier call per producer while no transaction of it is open.
Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.handlers.broker_view import HandlerCore, TxnVerifier
from broker.handlers.common import (
    Handler,
    RequestContext,
    as_minikafka_error,
    error_fields,
    require,
    serves,
)
from broker.handlers.fetch import LEADER_HINT_ERRORS
from broker.handlers.record_checks import CheckJob, CheckOutcome, run_checks
from broker.metadata.leader_hints import current_leader, leader_endpoints
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.protocol.message_types import (
    NodeEndpoint,
    ProduceRequest,
    ProduceResponse,
    ProduceResponsePartitionResponse,
    ProduceResponseResponse,
)
from clients.protocol.topics import TopicPartition, internal_topic_refusal
from clients.records.batch import (
    COMPRESSION_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
)
from clients.records.compression import ZSTD
from replication.partition import Partition
from replication.partition_errors import NotLeaderError
from replication.producer_state import VerificationGuard
from storage.log.validator import BatchInfo, CheckBudget


def _node_endpoints(core: HandlerCore, responses: list[ProduceResponseResponse]
                    ) -> list[NodeEndpoint]:
    """The endpoints of the leaders named in ``current_leader`` hints."""
    return leader_endpoints(core.image, {leader["leader_id"] for t in responses
                                         for p in t["partition_responses"]
                                         if (leader := p.get("current_leader"))})


log = logging.getLogger(__name__)
ZSTD_MIN_PRODUCE_VERSION = 7  # Kafka's rule (KIP-110): older clients cannot read zstd


def uses_zstd(records: Any) -> bool:
    """Whether a batch of a produce request's records is zstd-compressed (header walk only;
    a malformed tail is left to the append, which reports it precisely)."""
    if not records:
        return False
    view = memoryview(records)
    pos = 0
    while pos + HEADER_SIZE <= len(view):
        header = HEADER.unpack_from(view, pos)
        if header[5] & COMPRESSION_MASK == ZSTD:
            return True
        if header[1] <= 0:
            return False
        pos += header[1] + LOG_OVERHEAD
    return False


def handle_produce(core: HandlerCore, body: ProduceRequest, respond: Respond[ProduceResponse],
                   ctx: RequestContext) -> None:
    acks = body["acks"]
    if acks not in (0, 1, -1):
        message = f"acks must be 0, 1 or -1 (all), got {acks}"
        respond({"responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": int(ErrorCode.INVALID_REQUIRED_ACKS),
                 "error_message": message, "base_offset": -1} for p in t["partitions"]]}
            for t in body["topics"]
        ]})
        return
    config = core.config
    responses: list[ProduceResponseResponse] = []
    appends: list[tuple[str, int, Partition, Any, ProduceResponsePartitionResponse]] = []
    jobs: list[CheckJob] = []
    for topic in body["topics"]:
        name = topic["name"]
        results: list[ProduceResponsePartitionResponse] = []
        for entry in topic["partitions"]:
            result: ProduceResponsePartitionResponse = {
                "index": entry["index"], "error_code": 0, "error_message": None,
                "base_offset": -1}
            results.append(result)
            records: Any = entry["records"]  # decoded: a view of the frame, or None
            if ctx.version < ZSTD_MIN_PRODUCE_VERSION and uses_zstd(records):
                result.update({"error_code": int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
                               "error_message": "zstd batches need Produce v7 or later"})
                continue
            try:
                require(ctx, "Write", "Topic", name)
                refused = internal_topic_refusal(name, "append to")
                if refused is not None:
                    raise refused
                partition = core.partition_or_error(name, entry["index"])
                check = partition.log.leader_check(  # (compacted: keys; INVALID_RECORD)
                    max_batch_records=config.max_batch_records,
                    max_decompressed_bytes=config.max_batch_decompressed_bytes,
                ) if partition.is_leader else None  # (a follower answers NOT_LEADER)
            except Exception as exc:
                _fail(core, result, name, entry["index"], exc)
                continue
            appends.append((name, entry["index"], partition, records, result))
            jobs.append((check, records))
        responses.append({"name": name, "partition_responses": results})
    outcomes: list[CheckOutcome] = []
    guards: list[VerificationGuard | None] = []
    verifier: TxnVerifier | None = None  # (read only for a transactional request)

    def append_and_answer(release: Callable[[], None]) -> None:
        """Append (after the KIP-890 verification, if one is due) and answer; then
        ``release`` (frees the request's frame when it was kept)."""
        nonlocal verifier
        pending, verifier = _transactional_checks(core, ctx, body["transactional_id"],
                                                  appends, outcomes, guards)
        if not pending or verifier is None:
            append_all()
            release()
            return
        hold = ctx.keep_frame() if ctx.keep_frame is not None and release is _nothing \
            else release  # (the records must outlive this call)

        async def verify_then_append(verifier: TxnVerifier) -> None:
            try:
                await _verify(verifier, body["transactional_id"] or "", ctx.version, pending,
                              appends, outcomes)
                append_all()
            except Exception:
                log.exception("Produce: appending after the transaction verification failed")
                answer_failure()
            finally:
                hold()

        asyncio.get_running_loop().create_task(verify_then_append(verifier))

    def append_all() -> None:
        statuses: list[ProducePartitionStatus] = []
        keys = []
        for (name, index, partition, records, result), outcome, guard in zip(
                appends, outcomes, guards, strict=True):
            try:
                if outcome is None:
                    raise NotLeaderError(f"broker {partition.local_broker_id} is not the "
                                         f"leader of {name}-{index}")
                if isinstance(outcome, Exception):
                    raise outcome
                info = partition.append_records_as_leader(
                    records, acks, core.configs.min_insync_replicas(name), checked=outcome,
                    guard=guard, verification_required=verifier is not None
                    and _is_transactional(outcome))
            except Exception as exc:
                _fail(core, result, name, index, exc)
                continue
            core.topic_metrics.on_append(name, len(records or b""), info.num_records)
            result["base_offset"] = info.first_offset
            result["log_start_offset"] = partition.log_start_offset
            key = TopicPartition(name, index)
            keys.append(key)
            core.fetch_purgatory.check_and_complete(key)  # HW may have moved
            if acks == -1:
                statuses.append(ProducePartitionStatus(partition, info.last_offset + 1, result,
                                                       partition.leader_epoch))
        response_body: ProduceResponse = {"throttle_time_ms": 0, "responses": responses,
                         "node_endpoints": _node_endpoints(core, responses)}
        if acks == 0:
            respond(None)
            return
        if not statuses:
            respond(response_body)
            return
        op = DelayedProduce(max(body["timeout_ms"], 0), statuses, core.configs.min_insync_replicas,
                            lambda: respond(response_body))
        core.produce_purgatory.try_complete_else_watch(op, keys)

    checks = ctx.record_checks
    inline = None if checks is None else checks.inline_bytes
    if inline is not None and sum(len(r or b"") for _, r in jobs) > inline:
        inline = 0  # over the loop's share as sent already: no check started here
    budget = CheckBudget(config.max_produce_records, config.max_produce_decompressed_bytes,
                         inline)
    if run_checks(jobs, budget, outcomes):
        append_and_answer(_nothing)
        return
    assert checks is not None  # (without a thread the budget has no event-loop share)
    # the records (views of the request's frame) must outlive this call: the server
    # keeps the frame's pool buffer until ``release``
    release = ctx.keep_frame() if ctx.keep_frame is not None else _nothing

    def answer_failure() -> None:  # a bug: the connection waits for an answer, give one
        for topic in responses:
            for result in topic["partition_responses"]:
                if not result["error_code"]:
                    result.update({"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                                   "error_message": "the broker failed on this request",
                                   "base_offset": -1})
        respond(None if acks == 0 else {"throttle_time_ms": 0, "responses": responses,
                                        "node_endpoints": []})

    def finish() -> None:  # on the loop, once the thread is done
        try:
            append_and_answer(release)
        except Exception:
            log.exception("Produce: appending after the record-check thread failed")
            answer_failure()
            release()

    checks.submit(jobs, budget, outcomes, finish)


def _nothing() -> None:
    pass


def _is_transactional(checked: list[BatchInfo]) -> bool:
    return any(info[7][5] & TRANSACTIONAL_MASK for info in checked)


Pending = dict[tuple[int, int], list[int]]  # (producer id, epoch) -> indexes to verify


def _transactional_checks(core: HandlerCore, ctx: RequestContext,
                          transactional_id: str | None, appends: list[Any],
                          outcomes: list[CheckOutcome], guards: list[VerificationGuard | None]
                          ) -> tuple[Pending, TxnVerifier | None]:
    """Fill ``guards`` (one per append); a request with transactional batches but no
    ``transactional_id``, or one the user may not Write (ACLs), fails as a whole with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's check); the partitions whose first
    transactional batch must be verified (KIP-890), with their guard taken, and the
    verifier (None for a request without transactional batches)."""
    pending: Pending = {}
    verifier: TxnVerifier | None = None
    guards.extend([None] * len(appends))
    for i, ((_name, _index, partition, _records, _result), outcome) in enumerate(
            zip(appends, outcomes, strict=True)):
        if not isinstance(outcome, list) or not _is_transactional(outcome):
            continue
        if transactional_id is None or not ctx.allowed("Write", "TransactionalId",
                                                       transactional_id):
            refusal = MiniKafkaError(
                "transactional batches need the request's transactional_id" if
                transactional_id is None else f"not authorized to Write transactional id "
                f"{transactional_id!r}", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for j, other in enumerate(outcomes):
                if isinstance(other, list):
                    outcomes[j] = refusal
            return {}, None
        verifier = core.txn_verifier
        header = next(info[7] for info in outcome if info[7][5] & TRANSACTIONAL_MASK)
        pid, epoch = header[9], header[10]
        state = partition.producer_state
        if verifier is not None and pid >= 0 and state.needs_verification(pid, epoch):
            guards[i] = state.verification_guard(pid)
            pending.setdefault((pid, epoch), []).append(i)
    return pending, verifier


async def _verify(verifier: TxnVerifier, transactional_id: str, version: int,
                  pending: Pending, appends: list[Any], outcomes: list[CheckOutcome]) -> None:
    """Ask the coordinator about every pending partition; a refused one's outcome
    becomes its produce error (:func:`verification_error`)."""
    for (pid, epoch), indexes in pending.items():
        wanted = {TopicPartition(appends[i][0], appends[i][1]): i for i in indexes}
        try:
            answers = await verifier.verify(transactional_id, pid, epoch, list(wanted))
        except Exception as exc:  # the coordinator cannot be reached: retriable
            log.warning("Produce: transaction verification of %s failed: %s",
                        transactional_id, exc)
            answers = {}
        for tp, i in wanted.items():
            code = answers.get(tp, ErrorCode.NETWORK_EXCEPTION)
            if code != ErrorCode.NONE:
                outcomes[i] = MiniKafkaError(*verification_error(ErrorCode(code), version))


def verification_error(code: ErrorCode, version: int) -> tuple[str, ErrorCode]:
    """``(message, produce error)`` for the coordinator's answer ``code`` to a
    verification, at Produce ``version`` (Kafka's AddPartitionsToTxnManager and
    ReplicaManager mapping)."""
    if code == ErrorCode.PRODUCER_FENCED:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    elif code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED or (
            code == ErrorCode.TRANSACTION_ABORTABLE and version < 11):
        code = ErrorCode.INVALID_TXN_STATE
    if code in (ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR) or (
            code == ErrorCode.CONCURRENT_TRANSACTIONS and version < 12):
        return ("Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {code.name}", ErrorCode.NOT_ENOUGH_REPLICAS)
    if code == ErrorCode.INVALID_TXN_STATE:
        return "Partition was not added to the transaction", code
    return f"transaction verification failed: {code.name}", code


def _fail(core: HandlerCore, result: ProduceResponsePartitionResponse, name: str, index: int,
          exc: Exception) -> None:
    """Fill a partition's answer with ``exc`` (and a leader hint where it helps)."""
    result.update(error_fields(as_minikafka_error(exc)))
    if result["error_code"] in LEADER_HINT_ERRORS:
        result["current_leader"] = current_leader(core.image, name, index)


PRODUCE_HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: serves(handle_produce),
}
