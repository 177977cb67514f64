"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Pure functions from the group's subscriptions, the subscribed topics' partition counts
and the current target assignment to a new target assignment, as Kafka's
``UniformAssignor`` and ``RangeAssignor`` (group-coordinator module) compute it:

- ``uniform`` (the default): every partition of the subscribed topics goes to one of the
  members subscribed to its topic, balanced and sticky.  A member keeps the partitions
  it had in the previous target assignment up to its quota (the total over the members,
  rounded up for the first ``total % members``); the partitions left over go, in topic
  then partition order, to the subscribed member with the fewest partitions (ties: by
  member id).  With identical subscriptions this is Kafka's result up to tie-breaking:
  member counts differ by at most one and as few partitions as possible move.  With
  different subscriptions it is the same greedy fill (Kafka's heterogeneous optimizer
  balances further by moving partitions between members; not done here).
- ``range``: per topic, the members subscribed to it sorted by member id share its
  partitions in consecutive ranges, the first ``partitions % members`` one more each
  (co-partitioned topics land together, as Kafka's range does).  Not sticky by design.

Types: a topic is named by its id (16-byte UUID, as assignments travel on the wire);
an assignment is ``member id -> {topic id: frozenset of partitions}``; members with
nothing assigned map to ``{}``.

Costs: O(members + partitions x log members) for ``uniform`` (a heap per topic),
O(members x subscribed topics + partitions) for ``range``.  Pure: thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Set

TopicId = bytes
Assignment = dict[TopicId, frozenset[int]]  # one member's: topic id -> partitions
GroupAssignment = dict[str, Assignment]  # member id -> its assignment

UNIFORM = "uniform"
RANGE = "range"


def _freeze(parts: Mapping[TopicId, Set[int]]) -> Assignment:
    return {topic: frozenset(ps) for topic, ps in parts.items() if ps}


def uniform_assign(subscriptions: Mapping[str, Set[TopicId]],
                   partition_counts: Mapping[TopicId, int],
                   previous: Mapping[str, Assignment]) -> GroupAssignment:
    """Kafka's ``uniform`` assignor (see the module docstring).  ``subscriptions``:
    member id -> the topic ids it subscribes to (topics missing from
    ``partition_counts`` are ignored); ``previous``: the current target assignment."""
    members = sorted(subscriptions)
    if not members:
        return {}
    subscribed = {m: {t for t in subscriptions[m] if partition_counts.get(t, 0) > 0}
                  for m in members}
    total = sum(partition_counts[t] for t in set().union(*subscribed.values()))
    base, extra = divmod(total, len(members))
    # members keeping the most previous partitions get the larger quotas (fewer moves)
    kept_counts = {m: sum(1 for t, ps in previous.get(m, {}).items() if t in subscribed[m]
                          for p in ps if p < partition_counts[t]) for m in members}
    by_kept = sorted(members, key=lambda m: (-kept_counts[m], m))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_kept)}
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in members}
    counts = dict.fromkeys(members, 0)
    taken: set[tuple[TopicId, int]] = set()
    for m in members:  # stickiness: keep previous partitions up to the quota
        for topic in sorted(previous.get(m, {})):
            if topic not in subscribed[m]:
                continue
            for p in sorted(previous[m][topic]):
                if counts[m] >= quota[m] or p >= partition_counts[topic] \
                        or (topic, p) in taken:
                    continue
                result[m].setdefault(topic, set()).add(p)
                counts[m] += 1
                taken.add((topic, p))
    for topic in sorted(partition_counts):
        eligible = [m for m in members if topic in subscribed[m]]
        if not eligible:
            continue
        heap = [(counts[m], m) for m in eligible]
        heapq.heapify(heap)
        for p in range(partition_counts[topic]):
            if (topic, p) in taken:
                continue
            count, m = heapq.heappop(heap)
            while count != counts[m]:  # stale entry
                count, m = heapq.heappop(heap)
            result[m].setdefault(topic, set()).add(p)
            counts[m] += 1
            heapq.heappush(heap, (counts[m], m))
    return {m: _freeze(parts) for m, parts in result.items()}


def range_assign(subscriptions: Mapping[str, Set[TopicId]],
                 partition_counts: Mapping[TopicId, int],
                 previous: Mapping[str, Assignment]) -> GroupAssignment:
    """Kafka's ``range`` assignor (see the module docstring); ``previous`` is unused."""
    del previous
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in subscriptions}
    for topic in sorted(partition_counts):
        eligible = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not eligible:
            continue
        base, extra = divmod(partition_counts[topic], len(eligible))
        start = 0
        for i, m in enumerate(eligible):
            size = base + (1 if i < extra else 0)
            if size:
                result[m][topic] = set(range(start, start + size))
            start += size
    return {m: _freeze(parts) for m, parts in result.items()}


Assignor = Callable[[Mapping[str, Set[TopicId]], Mapping[TopicId, int],
                     Mapping[str, Assignment]], GroupAssignment]
ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
