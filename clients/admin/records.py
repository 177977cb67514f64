"""Record operations of :class:`~clients.admin.Admin`: delete the records before an
offset, and read partitions' high watermarks.

Contract: ``delete_records`` (DeleteRecords) goes to each partition's leader (from a
metadata refresh), retries retriable errors (not UNKNOWN_TOPIC_OR_PARTITION) every
100 ms until the timeout, and returns the new low watermarks (log start offsets);
a partition with no answer by then maps to RequestTimedOutError; per-partition
failures follow :func:`~clients.admin.requests.raise_first`.  ``high_watermarks``
(ListOffsets latest, from each leader) leaves out a partition whose leader is unknown,
unreachable or answers an error.

Costs: a metadata refresh plus one round trip per leader (per attempt for
``delete_records``).  Thread-safety: none (one caller thread, as the Admin).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, RequestTimedOutError, error_for
from clients.protocol.message_types import (
    DeleteRecordsRequest,
    DeleteRecordsRequestPartition,
    DeleteRecordsResponse,
    ListOffsetsRequest,
    ListOffsetsRequestPartition,
    ListOffsetsResponse,
)
from clients.protocol.topics import TopicPartition


class RecordAdmin:
    """DeleteRecords, and ListOffsets for high watermarks."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests
        self._metadata = requests.metadata

    def delete_records(
        self,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[TopicPartition, int | MiniKafkaError]:
        wanted: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            if not isinstance(offset, int) or offset < -1:
                raise ValueError(f"{tp}: offset must be an int >= -1, got {offset!r}")
            wanted[tp] = offset
        timeout = self._requests.timeout(timeout_ms)
        out: dict[TopicPartition, int | MiniKafkaError] = {}
        pending = dict(wanted)
        deadline = time.monotonic() + timeout / 1000
        while pending:
            remaining = max(1, int((deadline - time.monotonic()) * 1000))
            self._requests.refresh_metadata(sorted({tp.topic for tp in pending}), remaining,
                                            allow_auto_topic_creation=False)
            by_leader: dict[int, dict[str, list[DeleteRecordsRequestPartition]]] = {}
            for tp, offset in pending.items():
                leader = self._metadata.leader_for(tp)
                if leader is None:
                    code: int = self._metadata.topic_error(tp.topic) or (
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        if self._metadata.partition(tp) is None else ErrorCode.LEADER_NOT_AVAILABLE)
                    out[tp] = error_for(code, f"delete records of {tp}")
                    continue
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "offset": offset})
            retry: dict[TopicPartition, int] = {}
            for node, topics in by_leader.items():
                request: DeleteRecordsRequest = {
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout_ms": remaining}  # fmt: skip
                body = self._requests.request(node, ApiKey.DELETE_RECORDS, request, remaining,
                                              DeleteRecordsResponse)
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = TopicPartition(t["name"], p["partition_index"])
                        if tp not in pending:
                            continue
                        code = p["error_code"]
                        if code == ErrorCode.NONE:
                            out[tp] = p["low_watermark"]
                            continue
                        error = error_for(code, f"delete records of {tp}")
                        out[tp] = error
                        if error.retriable and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            retry[tp] = pending[tp]
            pending = retry
            if pending:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.1)
        for tp in wanted:
            out.setdefault(tp, RequestTimedOutError(f"delete records of {tp}: no answer"))
        return raise_first(out, raise_on_error)

    def high_watermarks(
        self, partitions: Iterable[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int]:
        """Latest offsets (the high watermark) from each leader; missing on errors."""
        wanted = list(partitions)
        if not wanted:
            return {}
        self._requests.refresh_metadata(sorted({tp.topic for tp in wanted}), timeout_ms,
                                        allow_auto_topic_creation=False)
        by_leader: dict[int, dict[str, list[ListOffsetsRequestPartition]]] = {}
        for tp in wanted:
            leader = self._metadata.leader_for(tp)
            if leader is not None:
                by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "timestamp": -1})
        out = {}
        for node, topics in by_leader.items():
            try:
                request: ListOffsetsRequest = {"topics": [
                    {"name": t, "partitions": ps} for t, ps in topics.items()]}
                body = self._requests.request(node, ApiKey.LIST_OFFSETS, request, timeout_ms,
                                              ListOffsetsResponse)
            except MiniKafkaError:
                continue
            for t in body["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == ErrorCode.NONE:
                        out[TopicPartition(t["name"], p["partition_index"])] = p["offset"]
        return out
