"""Handlers that answer questions about partitions' logs without reading records for a
client: ListOffsets and OffsetsForLeaderEpoch (:mod:`.offsets`), DescribeLogDirs
(:mod:`.log_dirs`).  Fetch is :mod:`broker.handlers.fetch`."""
