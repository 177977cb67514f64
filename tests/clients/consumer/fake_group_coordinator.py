"""A fake cluster that also serves the group APIs, for consumer-coordinator tests.

:class:`FakeGroupCluster` extends :class:`tests.clients.fake_broker.FakeCluster` with a
small in-memory group coordinator on node 0 (Kafka's rules, simplified):

- JoinGroup with an empty member id answers MEMBER_ID_REQUIRED with a new id (KIP-394,
  v4+; below v4 the member joins with the new id at once);
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
- ListGroups (state filter from v4), DescribeGroups (members with their metadata and
  assignment), DeleteGroups (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP as Kafka);
- every answer in the shape of the request's version: FindCoordinator v4 batches keys,
  LeaveGroup reads ``member_id`` before v3 and ``members`` from v3, OffsetFetch reads and
  answers ``groups`` from v8 (``topics`` null: every committed partition);
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
from clients.protocol.errors import ErrorCode, MiniKafkaError
from tests.clients.fake_broker import E, FakeCluster

_GROUP_APIS = {ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
               ApiKey.LEAVE_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH,
               ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS,
               ApiKey.CONSUMER_GROUP_DESCRIBE}


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
    offset_metadata: dict[tuple[str, int], str | None] = field(default_factory=dict)
    commits: int = 0
    protocol_type: str = "consumer"


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

    def _handle(
        self, node_id: int, api_key: ApiKey, body: dict[str, Any], version: int
    ) -> dict[str, Any] | None:
        if api_key == ApiKey.METADATA and self.metadata_delay_s > 0:
            time.sleep(self.metadata_delay_s)  # simulated broker latency (this connection only)
        if api_key == ApiKey.SYNC_GROUP and self.sync_delay_s > 0:
            time.sleep(self.sync_delay_s)
        if api_key not in _GROUP_APIS:
            return super()._handle(node_id, api_key, body, version)
        with self.cond:
            if api_key == ApiKey.FIND_COORDINATOR:
                return self._find(body, version)
            if api_key == ApiKey.LIST_GROUPS:
                return self._list_groups(body)
            if api_key == ApiKey.DESCRIBE_GROUPS:
                return self._describe_groups(body)
            if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:  # its groups are all classic
                return {"throttle_time_ms": 0, "groups": [
                    {"error_code": int(ErrorCode.GROUP_ID_NOT_FOUND), "error_message": None,
                     "group_id": g, "group_state": "", "group_epoch": -1,
                     "assignment_epoch": -1, "assignor_name": "", "members": [],
                     "authorized_operations": -2147483648} for g in body["group_ids"]]}
            if api_key == ApiKey.DELETE_GROUPS:
                return self._delete_groups(body)
            if api_key == ApiKey.OFFSET_FETCH:
                return self._offset_fetch(body, version)
            group = self.group(body["group_id"])
            if api_key == ApiKey.LEAVE_GROUP:
                return self._leave(group, body, version)
            if api_key == ApiKey.JOIN_GROUP:
                return self._join(group, body, version)
            handler = {
                ApiKey.SYNC_GROUP: self._sync, ApiKey.HEARTBEAT: self._heartbeat,
                ApiKey.OFFSET_COMMIT: self._commit,
            }[api_key]
            return handler(group, body)

    def _find(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        if body["key_type"] != 0:
            raise MiniKafkaError(f"FindCoordinator key_type {body['key_type']}")
        keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
        answers = []
        for key in keys:
            code = self.find_errors.pop(0) if self.find_errors else 0
            answers.append({"key": key, "error_code": code, "node_id": 0 if not code else -1,
                            "host": "127.0.0.1" if not code else "",
                            "port": self.port(0) if not code else -1,
                            "error_message": None if not code else "injected"})  # fmt: skip
        if version >= 4:
            return {"coordinators": answers}
        return answers[0]

    # ------------------------------------------------------------ membership
    def _rebalance(self, group: FakeGroup) -> None:
        if group.state != "PreparingRebalance":
            group.state = "PreparingRebalance"
            group.joining = {}
            group.join_deadline = time.monotonic() + self.join_window_s
            self.cond.notify_all()

    def _join(self, group: FakeGroup, body: dict[str, Any], version: int) -> dict[str, Any]:
        member_id = body["member_id"]
        base: dict[str, Any] = {"generation_id": -1, "protocol_name": None, "leader": "",
                                "members": []}
        if not member_id:
            new_id = f"{body.get('group_instance_id') or 'member'}-{next(self._ids)}"
            if version >= 4:  # KIP-394: the id comes back first, the member rejoins with it
                return {**base, "error_code": E.MEMBER_ID_REQUIRED, "member_id": new_id}
            member_id = new_id
        self._rebalance(group)
        group.joining[member_id] = body
        group.protocol_type = body["protocol_type"]
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

    def _leave(self, group: FakeGroup, body: dict[str, Any], version: int) -> dict[str, Any]:
        leaving = body["members"] if version >= 3 else [
            {"member_id": body["member_id"], "group_instance_id": None}]
        out, code = [], 0
        for m in leaving:
            known = m["member_id"] in group.members
            group.members.pop(m["member_id"], None)
            out.append({**m, "error_code": 0 if known else E.UNKNOWN_MEMBER_ID})
            code = code or (0 if known else E.UNKNOWN_MEMBER_ID)
        if group.members:
            self._rebalance(group)
        else:
            group.state = "Empty"
        if version >= 3:
            return {"error_code": 0, "members": out}
        return {"error_code": code}

    def _list_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        states = set(body["states_filter"])
        return {"error_code": 0, "groups": [
            {"group_id": g, "protocol_type": group.protocol_type, "group_state": group.state,
             "group_type": "classic"}
            for g, group in sorted(self.groups.items())
            if not states or group.state in states]}  # fmt: skip

    def _describe_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for g in body["groups"]:
            group = self.groups.get(g)
            if group is None:
                out.append({"error_code": 0, "group_id": g, "group_state": "Dead",
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            members = [{"member_id": m, "group_instance_id": b["group_instance_id"],
                        "client_id": "fake-client", "client_host": "/127.0.0.1",
                        "member_metadata": next((p["metadata"] for p in b["protocols"]
                                                 if p["name"] == group.protocol), b""),
                        "member_assignment": group.assignments.get(m, b"")}
                       for m, b in sorted(group.members.items())]  # fmt: skip
            out.append({"error_code": 0, "group_id": g, "group_state": group.state,
                        "protocol_type": group.protocol_type,
                        "protocol_data": group.protocol or "", "members": members})
        return {"groups": out}

    def _delete_groups(self, body: dict[str, Any]) -> dict[str, Any]:
        out = []
        for g in body["groups_names"]:
            group = self.groups.get(g)
            if group is None:
                code = E.GROUP_ID_NOT_FOUND
            elif group.members:
                code = E.NON_EMPTY_GROUP
            else:
                code = 0
                del self.groups[g]
            out.append({"group_id": g, "error_code": code})
        return {"results": out}

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
                    tp = (t["name"], p["partition_index"])
                    group.offsets[tp] = p["committed_offset"]
                    group.offset_metadata[tp] = p["committed_metadata"]
        return {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": code}
            for p in t["partitions"]]} for t in body["topics"]]}

    def _offsets_of(self, group_id: str, topics: list[dict[str, Any]] | None) -> list[Any]:
        group = self.groups.get(group_id) or FakeGroup()
        if topics is None:  # every partition the group has offsets for
            by_topic: dict[str, list[int]] = {}
            for name, index in sorted(group.offsets):
                by_topic.setdefault(name, []).append(index)
            topics = [{"name": n, "partition_indexes": ps} for n, ps in by_topic.items()]
        out = []
        for topic in topics:
            parts = []
            for p in topic["partition_indexes"]:
                offset = group.offsets.get((topic["name"], p), -1)
                metadata = group.offset_metadata.get((topic["name"], p), "")
                parts.append({"partition_index": p, "committed_offset": offset,
                              "metadata": metadata, "error_code": 0})  # fmt: skip
            out.append({"name": topic["name"], "partitions": parts})
        return out

    def _offset_fetch(self, body: dict[str, Any], version: int) -> dict[str, Any]:
        if version >= 8:
            return {"groups": [{"group_id": g["group_id"], "error_code": 0,
                                "topics": self._offsets_of(g["group_id"], g["topics"])}
                               for g in body["groups"]]}  # fmt: skip
        return {"error_code": 0, "topics": self._offsets_of(body["group_id"], body["topics"])}
