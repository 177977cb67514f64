"""Handlers of the partition side of transactions: WriteTxnMarkers, DescribeProducers.

WriteTxnMarkers v1-2 (the transaction coordinator to each partition leader, as a broker):
only a broker login may send it, on a listener that serves replication (Kafka's
CLUSTER_ACTION on the cluster; anyone else gets CLUSTER_AUTHORIZATION_FAILED for every
partition, nothing written).  Per marker and partition, errors per partition: the
partition must be hosted and led here (UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER), its ISR at least ``min.insync.replicas``
(NOT_ENOUGH_REPLICAS), and the marker must pass the producer state's rules 8-9
(INVALID_PRODUCER_EPOCH for an older producer epoch, or with ``transaction_version``
>= 2 an epoch not above the producer's (KIP-890 part 2: each transaction ends with a
bumped epoch, so a late marker of an earlier transaction cannot end a later one);
TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch).  A transaction-version-2
marker refused by rule 8 that this leader already wrote (the coordinator resent it after
its first answer was lost, or a newer coordinator finishes the same prepared transaction:
same producer epoch, coordinator epoch not older, no transaction opened since,
:meth:`replication.partition_log.PartitionLog.txn_marker_retry_offset`) is a retry: it
is answered like the first copy, once the HW reaches the LEO (answered at once, the
coordinator would complete the transaction while the marker could still be lost with
this leader).  The marker is appended
as leader (:meth:`replication.partition.Partition.append_txn_marker`) and answered like
an acks=all produce: a :class:`~broker.delayed.DelayedProduce` in the produce purgatory
until the HW passes it (REQUEST_TIMED_OUT after ``WRITE_TXN_MARKERS_TIMEOUT_MS``,
NOT_LEADER_OR_FOLLOWER if the leadership moved).  Once a marker on a partition of
``__consumer_offsets`` is replicated, ``core.txn_marker_listener`` (the group
coordinator's pending transactional offsets) is told, as Kafka calls its group
coordinator's ``onTransactionCompleted`` after the append completes.  Internal topics
are allowed (the coordinator writes markers to ``__consumer_offsets``).

DescribeProducers v0: per partition (Read on the topic, TOPIC_AUTHORIZATION_FAILED;
led here, NOT_LEADER_OR_FOLLOWER), the producers of the leader's producer state with
their epoch, last sequence and timestamp (-1 without a batch), coordinator epoch and the
first offset of their open transaction (-1: none).

Costs: one marker append per partition; DescribeProducers O(producers of the partition).
Thread-safety: run on the broker's event loop thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import (
    Handler,
    RequestContext,
    as_minikafka_error,
    error_fields,
    require,
    serves,
)
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponseActiveProducer,
    DescribeProducersResponsePartition,
    DescribeProducersResponseTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseMarker,
    WriteTxnMarkersResponsePartition,
)
from clients.protocol.scram import broker_id_of
from clients.protocol.topics import OFFSETS_TOPIC, TopicPartition
from clients.records.control import ControlType
from replication.partition_errors import NotLeaderError

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms for the marker append


def is_broker_login(ctx: RequestContext) -> bool:
    """Whether the request comes from a broker: on a listener serving replication, and
    logged in as a broker when the cluster has a secret."""
    return ctx.replication_allowed and (not ctx.brokers_authenticate
                                        or broker_id_of(ctx.principal) is not None)


def handle_write_txn_markers(core: HandlerCore, body: WriteTxnMarkersRequest,
                             respond: Respond[WriteTxnMarkersResponse],
                             ctx: RequestContext) -> None:
    denied = not is_broker_login(ctx)
    if denied:
        log.warning("refused a WriteTxnMarkers from %s: not a broker login",
                    ctx.principal or "an anonymous connection")
    markers: list[WriteTxnMarkersResponseMarker] = []
    statuses: list[ProducePartitionStatus] = []
    # (response partition, status result, topic, index, producer id, committed)
    answers: list[tuple[WriteTxnMarkersResponsePartition, dict[str, Any], str, int, int,
                        bool]] = []
    for marker in body["markers"]:
        pid, committed = marker["producer_id"], marker["transaction_result"]
        control = ControlType.COMMIT if committed else ControlType.ABORT
        topics: list[Any] = []
        for topic in marker["topics"]:
            name = topic["name"]
            parts: list[WriteTxnMarkersResponsePartition] = []
            for index in topic["partition_indexes"]:
                result: WriteTxnMarkersResponsePartition = {"partition_index": index,
                                                            "error_code": 0}
                parts.append(result)
                if denied:
                    result["error_code"] = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    continue
                strict = marker.get("transaction_version", 0) >= 2
                try:
                    partition = core.partition_or_error(name, index)
                    if not partition.is_leader:
                        raise NotLeaderError(f"broker {core.config.node_id} is not the "
                                             f"leader of {name}-{index}")
                    required = partition.append_txn_marker(
                        pid, marker["producer_epoch"], control, marker["coordinator_epoch"],
                        timestamp_ms=partition.partition_log.log.now_ms(),  # wall time, as Kafka's
                        min_insync_replicas=core.configs.min_insync_replicas(name),
                        strict_epoch=strict).last_offset + 1
                except Exception as exc:
                    error = as_minikafka_error(exc)
                    retry_at = partition.partition_log.txn_marker_retry_offset(
                        pid, marker["producer_epoch"], marker["coordinator_epoch"]
                    ) if strict and error.code == ErrorCode.INVALID_PRODUCER_EPOCH else None
                    if retry_at is None:
                        result["error_code"] = int(error.code)
                        log.info("WriteTxnMarkers %s-%d producer %d: %s", name, index, pid,
                                 error)
                        continue
                    required = retry_at  # a retry of a marker written here: once replicated
                core.fetch_purgatory.check_and_complete(TopicPartition(name, index))
                status_result: dict[str, Any] = {"error_code": 0}
                statuses.append(ProducePartitionStatus(partition, required,
                                                       status_result, partition.leader_epoch))
                answers.append((result, status_result, name, index, pid, committed))
            topics.append({"name": name, "partitions": parts})
        markers.append({"producer_id": pid, "topics": topics})

    def answer() -> None:
        listener = core.txn_marker_listener
        for result, status_result, name, index, pid, committed in answers:
            result["error_code"] = status_result["error_code"]
            if result["error_code"] == 0 and name == OFFSETS_TOPIC and listener is not None:
                try:
                    listener.on_txn_marker(name, index, pid, committed)
                except Exception:  # the marker is written: the answer still goes out
                    log.exception("TxnMarkerListener failed on %s-%d producer %d", name,
                                  index, pid)
        respond({"markers": markers})

    if not statuses:
        answer()
        return
    op = DelayedProduce(WRITE_TXN_MARKERS_TIMEOUT_MS, statuses,
                        core.configs.min_insync_replicas, answer)
    core.produce_purgatory.try_complete_else_watch(
        op, [TopicPartition(s.partition.topic, s.partition.index) for s in statuses])


def handle_describe_producers(core: HandlerCore, body: DescribeProducersRequest,
                              respond: Respond[DescribeProducersResponse],
                              ctx: RequestContext) -> None:
    topics: list[DescribeProducersResponseTopic] = []
    for topic in body["topics"]:
        name = topic["name"]
        parts: list[DescribeProducersResponsePartition] = []
        for index in topic["partition_indexes"]:
            result: DescribeProducersResponsePartition = {
                "partition_index": index, "error_code": 0, "error_message": None,
                "active_producers": []}
            parts.append(result)
            try:
                require(ctx, "Read", "Topic", name)
                partition = core.partition_or_error(name, index)
                if not partition.is_leader:
                    raise NotLeaderError(f"broker {core.config.node_id} is not the leader "
                                         f"of {name}-{index}")
            except Exception as exc:
                result.update(error_fields(as_minikafka_error(exc)))
                continue
            producers: list[DescribeProducersResponseActiveProducer] = []
            for entry in partition.producer_state.entries():
                last = entry.batches[-1] if entry.batches else None
                producers.append({
                    "producer_id": entry.producer_id, "producer_epoch": entry.epoch,
                    "last_sequence": -1 if last is None else last.last_seq,
                    "last_timestamp": -1 if last is None else last.timestamp_ms,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.current_txn_first_offset})
            result["active_producers"] = producers
        topics.append({"name": name, "partitions": parts})
    respond({"throttle_time_ms": 0, "topics": topics})


PARTITION_TXN_HANDLERS: dict[int, Handler] = {
    ApiKey.WRITE_TXN_MARKERS: serves(handle_write_txn_markers),
    ApiKey.DESCRIBE_PRODUCERS: serves(handle_describe_producers),
}
