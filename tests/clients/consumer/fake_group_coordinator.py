"""A fake cluster that also serves the group APIs, for consumer-coordinator tests.

:class:`FakeGroupCluster` extends :class:`tests.clients.fake_broker.FakeCluster` with a
small in-memory group coordinator on node 0 (Kafka's rules, simplified):

- JoinGroup with an empty member id answers MEMBER_ID_REQUIRED with a new id (KIP-394);
  a join starts a rebalance that completes when every known member has joined or
  ``join_window_s`` after the first join (members that did not rejoin are dropped);
  the first member (by id) becomes the leader and gets every member's metadata;
- SyncGroup: the leader's assignments complete the generation; followers wait for them;
- Heartbeat: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS as Kafka;
- LeaveGroup removes the member and starts a rebalance;
- OffsetCommit checks generation and member id (generation -1 with member "" only
  while the group has no members; accepted while PreparingRebalance, refused with
  REBALANCE_IN_PROGRESS while CompletingRebalance, as Kafka); OffsetFetch returns -1
  for nothing committed;
- ``find_errors``: codes the next FindCoordinator requests answer with;
- ``metadata_delay_s`` / ``sync_delay_s``: every Metadata / SyncGroup answer is sent
  this late (a slow, loaded broker).

Requests are served on per-connection threads (the base class), so a JoinGroup or
SyncGroup simply blocks its thread on ``cond`` until the generation completes.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from clients.protocol.api_keys import ApiKey
from tests.clients.fake_broker import E, FakeCluster

_GROUP_APIS = {ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
               ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH}


@dataclass
class FakeGroup:
    members: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> join body
    joining: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: str = "Empty"  # Empty, PreparingRebalance, CompletingRebalance, Stable
    generation: int = 0
    leader: str = ""
    protocol: str | None = None
    join_deadline: float = 0.0
    assignments: dict[str, bytes] = field(default_factory=dict)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    commits: int = 0


class FakeGroupCluster(FakeCluster):
    def __init__(self, num_brokers: int = 1, *, join_window_s: float = 0.5) -> None:
        super().__init__(num_brokers)
        self.groups: dict[str, FakeGroup] = {}
        self.join_window_s = join_window_s
        self.find_errors: list[int] = []
        self.metadata_delay_s = 0.0
        self.sync_delay_s = 0.0
        self.heartbeats = 0
        self._ids = itertools.count()

    def group(self, group_id: str) -> FakeGroup:
        return self.groups.setdefault(group_id, FakeGroup())

    def _handle(self, node_id: int, api_key: ApiKey, body: dict[str, Any]) -> dict[str, Any] | None:
        if api_key == ApiKey.METADATA and self.metadata_delay_s > 0:
            time.sleep(self.metadata_delay_s)  # simulated broker latency (this connection only)
        if api_key == ApiKey.SYNC_GROUP and self.sync_delay_s > 0:
            time.sleep(self.sync_delay_s)
        if api_key not in _GROUP_APIS:
            return super()._handle(node_id, api_key, body)
        with self.cond:
            if api_key == ApiKey.FIND_COORDINATOR:
                code = self.find_errors.pop(0) if self.find_errors else 0
                return {"error_code": code, "node_id": 0, "host": "127.0.0.1",
                        "port": self.port(0)}
            group = self.group(body["group_id"])
            handler = {
                ApiKey.JOIN_GROUP: self._join, ApiKey.SYNC_GROUP: self._sync,
                ApiKey.HEARTBEAT: self._heartbeat, ApiKey.LEAVE_GROUP: self._leave,
                ApiKey.OFFSET_COMMIT: self._commit, ApiKey.OFFSET_FETCH: self._fetch_offsets,
            }[api_key]
            return handler(group, body)

    # ------------------------------------------------------------ membership
    def _rebalance(self, group: FakeGroup) -> None:
        if group.state != "PreparingRebalance":
            group.state = "PreparingRebalance"
            group.joining = {}
            group.join_deadline = time.monotonic() + self.join_window_s
            self.cond.notify_all()

    def _join(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        member_id = body["member_id"]
        base: dict[str, Any] = {"generation_id": -1, "protocol_name": None, "leader": "",
                                "members": []}
        if not member_id:
            new_id = f"{body.get('group_instance_id') or 'member'}-{next(self._ids)}"
            return {**base, "error_code": E.MEMBER_ID_REQUIRED, "member_id": new_id}
        self._rebalance(group)
        group.joining[member_id] = body
        target = group.generation + 1
        while group.generation < target and not self._stopping:
            everyone = set(group.members) <= set(group.joining)
            if everyone or time.monotonic() >= group.join_deadline:
                self._complete_join(group)
                break
            self.cond.wait(0.02)
        if member_id not in group.members:
            return {**base, "error_code": E.UNKNOWN_MEMBER_ID, "member_id": member_id}
        members = []
        if member_id == group.leader:
            members = [{"member_id": m, "group_instance_id": b["group_instance_id"],
                        "metadata": next(p["metadata"] for p in b["protocols"]
                                         if p["name"] == group.protocol)}
                       for m, b in group.members.items()]  # fmt: skip
        return {"error_code": 0, "generation_id": group.generation, "protocol_type": "consumer",
                "protocol_name": group.protocol, "leader": group.leader,
                "member_id": member_id, "members": members}

    def _complete_join(self, group: FakeGroup) -> None:
        group.members = dict(group.joining)
        group.joining = {}
        group.generation += 1
        group.leader = min(group.members)
        first = next(iter(group.members.values()))
        group.protocol = next(p["name"] for p in first["protocols"]
                              if all(p["name"] in {q["name"] for q in b["protocols"]}
                                     for b in group.members.values()))  # fmt: skip
        group.state = "CompletingRebalance"
        group.assignments = {}
        self.cond.notify_all()

    def _check(self, group: FakeGroup, member_id: str, generation: int) -> int:
        if member_id not in group.members:
            return int(E.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return int(E.ILLEGAL_GENERATION)
        if group.state == "PreparingRebalance":
            return int(E.REBALANCE_IN_PROGRESS)
        return 0

    def _sync(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        member_id, generation = body["member_id"], body["generation_id"]
        code = self._check(group, member_id, generation)
        if code:
            return {"error_code": code, "assignment": b""}
        if member_id == group.leader:
            group.assignments = {a["member_id"]: a["assignment"] for a in body["assignments"]}
            group.state = "Stable"
            self.cond.notify_all()
        while group.state == "CompletingRebalance" and group.generation == generation \
                and not self._stopping:
            self.cond.wait(0.05)
        code = self._check(group, member_id, generation)
        return {"error_code": code, "protocol_name": group.protocol,
                "assignment": group.assignments.get(member_id, b"") if not code else b""}

    def _heartbeat(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        self.heartbeats += 1
        return {"error_code": self._check(group, body["member_id"], body["generation_id"])}

    def _leave(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for m in body["members"]:
            known = m["member_id"] in group.members
            group.members.pop(m["member_id"], None)
            out.append({**m, "error_code": 0 if known else E.UNKNOWN_MEMBER_ID})
        if group.members:
            self._rebalance(group)
        else:
            group.state = "Empty"
        return {"error_code": 0, "members": out}

    # ------------------------------------------------------------ offsets
    def _commit(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        if body["generation_id"] == -1 and not body["member_id"]:
            code = int(E.UNKNOWN_MEMBER_ID) if group.members else 0
        else:  # Kafka: allowed while PreparingRebalance, not while CompletingRebalance
            code = self._check(group, body["member_id"], body["generation_id"])
            if code == E.REBALANCE_IN_PROGRESS:
                code = 0
            elif not code and group.state == "CompletingRebalance":
                code = int(E.REBALANCE_IN_PROGRESS)
        if not code:
            group.commits += 1
            for t in body["topics"]:
                for p in t["partitions"]:
                    group.offsets[(t["name"], p["partition_index"])] = p["committed_offset"]
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body["topics"]]}

    def _fetch_offsets(self, group: FakeGroup, body: dict[str, Any]) -> dict[str, Any]:
        return {"error_code": 0, "topics": [{"name": t["name"], "partitions": [
            {"partition_index": p, "committed_offset": group.offsets.get((t["name"], p), -1),
             "error_code": 0} for p in t["partition_indexes"]]} for t in body["topics"] or []]}
