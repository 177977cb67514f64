"""Log-directory operations of :class:`~clients.admin.Admin`: what each broker stores
where (Kafka's ``describeLogDirs``, the data behind ``kafka-log-dirs.sh``).

Contract: ``describe_log_dirs(brokers, topics)`` sends DescribeLogDirs to each broker
named (None: every broker of a metadata refresh), asking for every replica (``topics``
None) or the partitions of the named topics.  Each broker maps to its log dirs
(:class:`LogDirDescription`: path, error code, total and usable bytes or -1, and each
replica's size, offset lag and whether it is a future replica), or to the error the
whole request got (a broker that does not answer, or a request-level error such as
CLUSTER_AUTHORIZATION_FAILED); per-broker failures follow
:func:`~clients.admin.requests.raise_first`.

Costs: one round trip per broker (plus a metadata refresh).  Thread-safety: none (one
caller thread, as the Admin).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from clients.admin.requests import AdminRequests, raise_first
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError, error_for
from clients.protocol.message_types import DescribeLogDirsRequest, DescribeLogDirsResponse
from clients.protocol.topics import TopicPartition


class ReplicaInfo(NamedTuple):
    """One replica in a log dir: its size on disk, how far its log end is behind the
    high watermark, and whether it is a future replica (being moved between dirs)."""

    size_bytes: int
    offset_lag: int
    is_future: bool


class LogDirDescription(NamedTuple):
    """One log dir of a broker (``error_code`` 0 when readable; bytes -1 when unknown)."""

    path: str
    error_code: int
    total_bytes: int
    usable_bytes: int
    replicas: dict[TopicPartition, ReplicaInfo]


class LogDirAdmin:
    """DescribeLogDirs, broker by broker."""

    def __init__(self, requests: AdminRequests) -> None:
        self._requests = requests
        self._metadata = requests.metadata

    def describe_log_dirs(
        self,
        brokers: Iterable[int] | None = None,
        topics: Iterable[str] | None = None,
        *,
        timeout_ms: int | None = None,
        raise_on_error: bool = True,
    ) -> dict[int, list[LogDirDescription] | MiniKafkaError]:
        timeout = self._requests.timeout(timeout_ms)
        names = None if topics is None else sorted(set(topics))
        self._requests.refresh_metadata(names or [], timeout, allow_auto_topic_creation=False)
        nodes = (sorted(b.node_id for b in self._metadata.brokers()) if brokers is None
                 else sorted(set(brokers)))
        request: DescribeLogDirsRequest = {"topics": None if names is None else [
            {"name": t, "partitions": [p.partition for p in self._metadata.partitions_for(t)
                                       or []]}
            for t in names]}  # fmt: skip
        out: dict[int, list[LogDirDescription] | MiniKafkaError] = {}
        for node in nodes:
            if self._metadata.broker(node) is None:
                out[node] = error_for(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {node} is not "
                                      "in the cluster's metadata")
                continue
            try:
                body = self._requests.request(node, ApiKey.DESCRIBE_LOG_DIRS, request, timeout,
                                              DescribeLogDirsResponse)
            except MiniKafkaError as exc:
                out[node] = exc
                continue
            if body.get("error_code", 0):
                out[node] = error_for(body["error_code"], f"describe log dirs of broker {node}")
                continue
            out[node] = [LogDirDescription(
                r["log_dir"], r["error_code"], r.get("total_bytes", -1),
                r.get("usable_bytes", -1),
                {TopicPartition(t["name"], p["partition_index"]):
                 ReplicaInfo(p["size_bytes"], p["offset_lag"], p["is_future_key"])
                 for t in r["topics"] for p in t["partitions"]})
                for r in body["results"]]  # fmt: skip
        return raise_first(out, raise_on_error)
