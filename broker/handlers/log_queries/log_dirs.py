"""DescribeLogDirs: one log dir (the data directory) with Kafka's fields and our tagged
extras per partition (its damage marks: the scrubber's findings and recovery's cut);
``total_bytes`` / ``usable_bytes`` from the file system.  Needs Describe on the Cluster
(Kafka's rule; else CLUSTER_AUTHORIZATION_FAILED and no result).

Costs: O(partitions hosted) (sorted).  Thread-safety: the broker's event loop thread only.
"""

from __future__ import annotations

import logging
import shutil

from broker.acls import CLUSTER_RESOURCE
from broker.handlers.broker_view import HandlerCore
from broker.handlers.common import Handler, RequestContext, serves
from broker.requests.respond import Respond
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResponsePartition,
    DescribeLogDirsResponseResult,
)
from clients.protocol.topics import TopicPartition

log = logging.getLogger(__name__)


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


LOG_DIRS_HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_LOG_DIRS: serves(handle_describe_log_dirs),
}
