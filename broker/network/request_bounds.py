"""Per-request bounds checked on the frame, before the body is decoded.

Decoding is one call of the compiled codec and costs ~0.7 us per array entry, so a legal
16 MiB Metadata request naming a million topics would hold the event loop for most of a
second before any handler could refuse it.  :func:`check_request_bounds` reads only the
counts it needs from the frame (the request header already read) and says whether the
request names more than its bound:

| API      | counted                                             | bound (config)         |
|----------|-----------------------------------------------------|------------------------|
| Metadata | topics named (null = all topics: not counted)       | ``max_metadata_topics`` |
| Fetch    | partitions named over all topics (a topic naming no | ``max_fetch_partitions``|
|          | partition counts as one)                            |                        |
| Produce  | partition entries over all topics (the same rule)   | ``max_produce_partitions``|

The walk stops as soon as the bound is passed, so it costs O(bound) whatever the frame
holds: Metadata reads one count; Fetch reads each topic's name length (v13+: skips its
16-byte id) and partition count, skips fixed-size partition entries in classic versions
(v4-11) and walks each entry's tagged fields in flexible ones (v12+); Produce skips each
entry's records by their length (and tagged fields from v9).  A frame too short or malformed for the
walk is not judged here (``None``): the decoder then reports the precise error.

What an over-bound request gets is the caller's choice (the broker: an answer naming no
topic / a Fetch error, :mod:`broker.handlers.bounds`; the controller: the same for
Metadata).  Pure functions of bytes; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from clients.protocol.api_keys import ApiKey
from clients.protocol.codec import RequestHeader
from clients.protocol.compiler import read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FLEXIBLE_METADATA = 9
_FLEXIBLE_FETCH = 12
_FLEXIBLE_PRODUCE = 9


def check_request_bounds(header: RequestHeader, *, max_metadata_topics: int,
                         max_fetch_partitions: int,
                         max_produce_partitions: int | None = None) -> str | None:
    """Why ``header``'s request is over its bound (for the log), or None when it is not
    (or cannot be judged before decoding)."""
    if header.body_offset < 0:
        return None
    key, version = header.api_key, header.api_version
    try:
        if key == ApiKey.METADATA:
            n = metadata_topic_count(header.frame, header.body_offset, version)
            if n > max_metadata_topics:
                return f"Metadata names {n} topics (max_metadata_topics {max_metadata_topics})"
        elif key == ApiKey.FETCH:
            n = fetch_partition_count(header.frame, header.body_offset, version,
                                      stop_after=max_fetch_partitions)
            if n > max_fetch_partitions:
                return (f"Fetch names more than {max_fetch_partitions} partitions "
                        f"(max_fetch_partitions)")
        elif key == ApiKey.PRODUCE and max_produce_partitions is not None:
            n = produce_partition_count(header.frame, header.body_offset, version,
                                        stop_after=max_produce_partitions)
            if n > max_produce_partitions:
                return (f"Produce names more than {max_produce_partitions} partitions "
                        f"(max_produce_partitions)")
    except (IndexError, ValueError, struct.error):
        return None
    return None


def _array_length(view: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """(entries, position after the length); null or negative -> 0."""
    if flexible:
        n, pos = read_uvarint(view, pos)
        return max(n - 1, 0), pos
    return max(_I32.unpack_from(view, pos)[0], 0), pos + 4


def _skip_string(view: memoryview, pos: int, flexible: bool) -> int:
    if flexible:
        n, pos = read_uvarint(view, pos)
        return pos + max(n - 1, 0)
    return pos + 2 + max(_I16.unpack_from(view, pos)[0], 0)


def _skip_tagged_fields(view: memoryview, pos: int) -> int:
    count, pos = read_uvarint(view, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(view, pos)
        size, pos = read_uvarint(view, pos)
        pos += size
    return pos


def metadata_topic_count(view: memoryview, pos: int, version: int) -> int:
    """Topics a Metadata request names (``topics`` is its first field in every version)."""
    return _array_length(view, pos, version >= _FLEXIBLE_METADATA)[0]


def _fetch_partition_bytes(version: int) -> int:
    """Fixed bytes of one partition entry of a Fetch request at ``version`` (v4+)."""
    size = 4 + 8 + 4  # partition, fetch_offset, partition_max_bytes
    if version >= 5:
        size += 8  # log_start_offset
    if version >= 9:
        size += 4  # current_leader_epoch
    if version >= 12:
        size += 4  # last_fetched_epoch
    return size


def _count_partitions(view: memoryview, pos: int, flexible: bool, stop_after: int,
                      skip_entries: Callable[[int, int], int], what: str,
                      by_id: bool = False) -> int:
    """The topics array at ``pos``: partition entries over all topics (a topic naming none
    counts as one), stopping once past ``stop_after``; ``skip_entries(pos, n)`` is where a
    topic's ``n`` entries (and, flexible, its tagged fields) end.  Topics are named by a
    string, or (``by_id``) by a 16-byte topic id."""
    topics, pos = _array_length(view, pos, flexible)
    total = 0
    end = len(view)
    for _ in range(topics):
        pos = pos + 16 if by_id else _skip_string(view, pos, flexible)
        partitions, pos = _array_length(view, pos, flexible)
        total += max(partitions, 1)
        if total > stop_after:
            return total
        pos = skip_entries(pos, partitions)
        if pos > end:
            raise IndexError(f"{what} request shorter than its counts")
    return total


def fetch_partition_count(view: memoryview, pos: int, version: int, *, stop_after: int) -> int:
    """Partitions a Fetch request (v4-17) names, a topic naming none counting as one; the
    walk stops once the count passes ``stop_after`` (the count returned is then larger
    than ``stop_after``, not exact)."""
    flexible = version >= _FLEXIBLE_FETCH
    if version <= 14:
        pos += 4  # replica_id (v15+: in the tagged replica_state, at the end)
    pos += 4 + 4 + 4 + 1  # max_wait_ms, min_bytes, max_bytes, isolation_level
    if version >= 7:
        pos += 4 + 4  # session_id, session_epoch
    entry = _fetch_partition_bytes(version)

    def skip(pos: int, partitions: int) -> int:
        if not flexible:
            return pos + partitions * entry
        for _ in range(partitions):
            pos += entry
            if view[pos] == 0:  # no tagged field (the usual case): one byte
                pos += 1
            else:
                pos = _skip_tagged_fields(view, pos)
        return _skip_tagged_fields(view, pos)

    return _count_partitions(view, pos, flexible, stop_after, skip, "Fetch",
                             by_id=version >= 13)


def produce_partition_count(view: memoryview, pos: int, version: int, *,
                            stop_after: int) -> int:
    """Partition entries a Produce request (v3-12) names, a topic naming none counting as
    one; the walk stops once the count passes ``stop_after`` (as for Fetch)."""
    flexible = version >= _FLEXIBLE_PRODUCE
    pos = _skip_string(view, pos, flexible) + 2 + 4  # transactional_id, acks, timeout_ms

    def skip(pos: int, partitions: int) -> int:
        for _ in range(partitions):
            pos += 4  # index
            if flexible:
                size, pos = read_uvarint(view, pos)
                pos = _skip_tagged_fields(view, pos + max(size - 1, 0))
            else:
                pos += 4 + max(_I32.unpack_from(view, pos)[0], 0)
        return _skip_tagged_fields(view, pos) if flexible else pos

    return _count_partitions(view, pos, flexible, stop_after, skip, "Produce")
