"""The controller's APIs: each request a broker (or, forwarded, a client) sends the
controller, turned into a call on :class:`~broker.controller.state.ControllerState` and
its result into the API's answer (Kafka's ``ControllerApis``).

Contract: every mutation follows one path with no ``await`` before its records are
written: state method -> records -> :meth:`ControllerApis.commit` (``ControllerLog.append``,
fsync) -> wake waiting fetches -> answer.  With a quorum
(:class:`~broker.controller.quorum.metadata_quorum.MetadataQuorum`) ``commit`` proposes
the records at once and awaits their commit; the state APIs then answer only on the
active controller (else NOT_CONTROLLER in the API's shape, REQUEST_TIMED_OUT for a
change not committed in ``quorum_commit_timeout_ms``), and the metadata Fetch reads up
to the quorum's high watermark.  If the append fails the image is ahead of the disk:
``commit`` calls ``on_fatal`` and raises :class:`FatalControllerError`.  Who may call
which API (logins, probation, bounds) is the connection's business
(:mod:`broker.controller.server`); the answers' shapes are listed there.

Costs: a Metadata answer walks every asked topic's partitions; a Fetch reads at most
``max_bytes`` from the metadata log and waits at most ``min(max_wait_ms,
max_fetch_wait_ms)`` at the log end.

Not thread-safe: one event loop owns it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from broker.controller.config import ControllerConfig
from broker.controller.log import ControllerLog
from broker.controller.not_controller import not_controller_answer
from broker.controller.quorum.metadata_quorum import MetadataQuorum, NotCommittedError
from broker.controller.results import (
    ConfigOp,
    ConfigOperation,
    ElectionType,
    IsrChange,
    PartitionsSpec,
    ReplicaLog,
    ResourceChange,
    TopicSpec,
)
from broker.controller.state import ControllerState
from broker.metadata.records import (
    INTERNAL_LISTENER,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    NO_LEADER,
    MetadataRecord,
)
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode
from clients.protocol.message_types import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionReassignmentsResponseResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResponsePartition,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ApiVersionsResponseApiKey,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeQuorumResponseCurrentVoter,
    DescribeQuorumResponsePartition,
    DescribeQuorumResponseTopic,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponseReplicaElectionResult,
    FetchRequest,
    FetchRequestPartition,
    FetchResponse,
    FetchResponsePartition,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseTopic,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from clients.protocol.registry import APIS
from clients.protocol.topics import ZERO_UUID

# the metadata log is fetched by name (Fetch v13+, by topic id, is served by brokers)
CONTROLLER_MAX_VERSIONS: dict[int, int] = {ApiKey.FETCH: 12}
# served by the active controller only (a quorum's other voters: NOT_CONTROLLER)
ACTIVE_ONLY_APIS = frozenset({
    ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
    ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS,
    ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS})
# (body, version) -> answer: the server's view, plain bodies of any API
Handler = Callable[[dict[str, Any], int], Awaitable[dict[str, Any]]]
_Request = TypeVar("_Request", bound=Mapping[str, object])
_Response = TypeVar("_Response", bound=Mapping[str, object])


def _serves(handler: Callable[[_Request, int], Awaitable[_Response]]) -> Handler:
    """``handler``, typed with its API's message types, as a :data:`Handler`: the one
    boundary where a decoded body enters the handler of its API."""
    return cast(Handler, handler)


class FatalControllerError(Exception):
    """The metadata log could not be written: the process must stop."""


class ControllerApis:
    """The handlers of the APIs the controller serves, over one state and its log: the
    single controller's ``store``, or a voter's ``quorum`` (exactly one of them)."""

    def __init__(self, config: ControllerConfig, state: ControllerState,
                 store: ControllerLog | None, on_fatal: Callable[[BaseException], None],
                 quorum: MetadataQuorum | None = None) -> None:
        if (store is None) == (quorum is None):
            raise ValueError("a controller has a ControllerLog or a MetadataQuorum")
        self.config = config
        self.state = state
        self.store = store
        self.quorum = quorum
        self._on_fatal = on_fatal
        self.appended = asyncio.Event()  # set (and replaced) on every append
        self.handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: _serves(self.api_versions),
            ApiKey.BROKER_REGISTRATION: _serves(self.register),
            ApiKey.BROKER_HEARTBEAT: _serves(self.heartbeat),
            ApiKey.ALTER_PARTITION: _serves(self.alter_partition),
            ApiKey.ALLOCATE_PRODUCER_IDS: _serves(self.allocate_producer_ids),
            ApiKey.CREATE_TOPICS: _serves(self.create_topics),
            ApiKey.DELETE_TOPICS: _serves(self.delete_topics),
            ApiKey.CREATE_PARTITIONS: _serves(self.create_partitions),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: _serves(self.incremental_alter_configs),
            ApiKey.ALTER_CONFIGS: _serves(self.alter_configs),
            ApiKey.ELECT_LEADERS: _serves(self.elect_leaders),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: _serves(self.alter_reassignments),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: _serves(self.list_reassignments),
            ApiKey.METADATA: _serves(self.metadata),
            ApiKey.FETCH: _serves(self.fetch),
            ApiKey.DESCRIBE_QUORUM: _serves(self.describe_quorum),
        }
        if quorum is not None:
            for key in ACTIVE_ONLY_APIS:
                self.handlers[key] = self._active_only(key, self.handlers[key])

    @property
    def active(self) -> bool:
        """This process may change the metadata (single controller, or the quorum's
        active controller)."""
        return self.quorum is None or self.quorum.active

    def _active_only(self, api_key: int, handler: Handler) -> Handler:
        """``handler`` on the active controller; NOT_CONTROLLER elsewhere, and when the
        change was not committed (REQUEST_TIMED_OUT if still active)."""
        async def guarded(body: dict[str, Any], version: int) -> dict[str, Any]:
            if not self.active:
                return not_controller_answer(api_key, version, body, ErrorCode.NOT_CONTROLLER,
                                             "not the active controller")
            try:
                return await handler(body, version)
            except NotCommittedError as e:
                return not_controller_answer(api_key, version, body, e.code, e.message)
        return guarded

    def wake_fetches(self) -> None:
        """Records became readable: answer the metadata fetches waiting at the end."""
        self.appended.set()
        self.appended = asyncio.Event()

    async def commit(self, records: list[MetadataRecord]) -> None:
        """Make ``records`` (already applied to the state's image) durable before the
        caller answers: the single controller appends (fsync) and wakes waiting fetches
        without suspending; a quorum's active controller proposes them at once (before
        any other request runs) and returns when a majority has them
        (:class:`NotCommittedError` otherwise).  A failed append is fatal."""
        if not records:
            return
        try:
            if self.quorum is not None:
                await self.quorum.commit(records, self.state.image)
                return
            assert self.store is not None
            self.store.append(records, self.state.image)
        except (NotCommittedError, FatalControllerError):
            raise
        except Exception as e:
            self._on_fatal(e)
            raise FatalControllerError(f"cannot write the metadata log: {e}") from e
        self.wake_fetches()

    async def api_versions(self, body: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
        served = sorted({*self.handlers, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
        keys: list[ApiVersionsResponseApiKey] = [
            {"api_key": int(k), "min_version": APIS[k].min_version,
             "max_version": CONTROLLER_MAX_VERSIONS.get(k, APIS[k].max_version)}
            for k in served]
        return {"error_code": 0, "api_keys": keys}

    async def register(self, body: BrokerRegistrationRequest,
                       version: int) -> BrokerRegistrationResponse:
        refused = _registration_error(body)
        if refused is not None:
            return {"error_code": int(refused[0]), "error_message": refused[1],
                    "broker_epoch": -1}
        listener = next(x for x in body["listeners"] if x["name"] != INTERNAL_LISTENER)
        internal = next(((x["host"], x["port"]) for x in body["listeners"]
                         if x["name"] == INTERNAL_LISTENER), None)
        result, records = self.state.register_broker(
            body["broker_id"], body["incarnation_id"].hex(), listener["host"],
            listener["port"], body["rack"], body["cluster_id"],
            [ReplicaLog(r["topic_name"], r["partition_index"], r["topic_id"],
                        r["last_leader_epoch"], r["log_end_offset"], r["recovery_cut"],
                        r["topic_uuid"])
             for r in body["replica_logs"]], internal)
        await self.commit(records)
        return {"error_code": int(result.error), "error_message": result.message,
                "broker_epoch": result.broker_epoch}

    async def heartbeat(self, body: BrokerHeartbeatRequest,
                        version: int) -> BrokerHeartbeatResponse:
        result, records = self.state.heartbeat(
            body["broker_id"], body["broker_epoch"], body["current_metadata_offset"],
            body["want_fence"], body["want_shut_down"])
        await self.commit(records)
        return {"error_code": int(result.error), "error_message": result.message,
                "is_caught_up": result.is_caught_up, "is_fenced": result.is_fenced,
                "should_shut_down": result.should_shut_down,
                "report_replica_logs": result.report_replica_logs}

    async def alter_partition(self, body: AlterPartitionRequest,
                              version: int) -> AlterPartitionResponse:
        changes = [IsrChange(t["name"], p["partition_index"], p["leader_epoch"], p["new_isr"],
                             p["partition_epoch"])
                   for t in body["topics"] for p in t["partitions"]]
        (error, results), records = self.state.alter_partition(
            body["broker_id"], body["broker_epoch"], changes)
        await self.commit(records)
        by_topic: dict[str, list[AlterPartitionResponsePartition]] = {}
        for r in results:
            s = r.state
            by_topic.setdefault(r.topic, []).append({
                "partition_index": r.partition, "error_code": int(r.error),
                "error_message": r.message, "leader_id": s.leader if s else NO_LEADER,
                "leader_epoch": s.leader_epoch if s else -1, "isr": list(s.isr) if s else [],
                "partition_epoch": s.partition_epoch if s else -1})
        return {"error_code": int(error),
                "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def allocate_producer_ids(self, body: AllocateProducerIdsRequest,
                                    version: int) -> AllocateProducerIdsResponse:
        result, records = self.state.allocate_producer_ids(body["broker_id"],
                                                          body["broker_epoch"])
        await self.commit(records)  # fsync'd before the block is handed out
        return {"error_code": int(result.error), "error_message": result.message,
                "producer_id_start": result.producer_id_start,
                "producer_id_len": result.producer_id_len}

    async def create_topics(self, body: CreateTopicsRequest,
                            version: int) -> CreateTopicsResponse:
        specs = [TopicSpec(t["name"], t["num_partitions"], t["replication_factor"],
                           {a["partition_index"]: a["broker_ids"] for a in t["assignments"]},
                           [(c["name"], c["value"]) for c in t["configs"]])
                 for t in body["topics"]]
        results, records = self.state.create_topics(specs, body["validate_only"])
        await self.commit(records)
        # configs stay null (Kafka: "not returned"): the forwarding broker fills them in
        # from its catalog of defaults, which the controller does not have
        return {"throttle_time_ms": 0, "topics": [
            {"name": r.name, "topic_id": r.topic_uuid, "error_code": int(r.error),
             "error_message": r.message, "num_partitions": r.num_partitions,
             "replication_factor": r.replication_factor, "configs": None} for r in results]}

    async def delete_topics(self, body: DeleteTopicsRequest,
                            version: int) -> DeleteTopicsResponse:
        entries: list[tuple[str | None, bytes]] = (
            [(t["name"], t["topic_id"]) for t in body["topics"]] if version >= 6 else
            [(n, ZERO_UUID) for n in body["topic_names"]])
        both = [(n, i) for n, i in entries if n is not None and i != ZERO_UUID]
        results, records = self.state.delete_topics(
            [n if n is not None else i for n, i in entries if (n, i) not in both])
        await self.commit(records)
        responses: list[DeleteTopicsResponseResponse] = [
            {"name": r.name if r.error != ErrorCode.UNKNOWN_TOPIC_ID else None,
             "topic_id": r.topic_uuid, "error_code": int(r.error),
             "error_message": r.message} for r in results]
        responses.extend({"name": n, "topic_id": i, "error_code": int(ErrorCode.INVALID_REQUEST),
                          "error_message": "a topic is named by its name or by its id, not both"}
                         for n, i in both)
        return {"throttle_time_ms": 0, "responses": responses}

    async def create_partitions(self, body: CreatePartitionsRequest,
                                version: int) -> CreatePartitionsResponse:
        specs = [PartitionsSpec(t["name"], t["count"], None if t["assignments"] is None
                                else [a["broker_ids"] for a in t["assignments"]])
                 for t in body["topics"]]
        results, records = self.state.create_partitions(specs, body["validate_only"])
        await self.commit(records)
        return {"throttle_time_ms": 0, "results": [
            {"name": r.name, "error_code": int(r.error), "error_message": r.message}
            for r in results]}

    async def incremental_alter_configs(self, body: IncrementalAlterConfigsRequest,
                                        version: int) -> IncrementalAlterConfigsResponse:
        resources = [ResourceChange(r["resource_type"], r["resource_name"], [
            ConfigOp(c["name"], c["config_operation"], c["value"]) for c in r["configs"]])
            for r in body["resources"]]
        return await self._alter_configs_answer(resources, body["validate_only"],
                                                incremental=True)

    async def alter_configs(self, body: AlterConfigsRequest,
                            version: int) -> AlterConfigsResponse:
        resources = [ResourceChange(r["resource_type"], r["resource_name"], [
            ConfigOp(c["name"], ConfigOperation.SET, c["value"]) for c in r["configs"]])
            for r in body["resources"]]
        return await self._alter_configs_answer(resources, body["validate_only"],
                                                incremental=False)

    async def _alter_configs_answer(self, resources: list[ResourceChange], validate_only: bool,
                              incremental: bool) -> AlterConfigsResponse:
        """(IncrementalAlterConfigs' response has the same fields)"""
        results, records = self.state.alter_configs(resources, validate_only, incremental)
        await self.commit(records)
        return {"throttle_time_ms": 0, "responses": [
            {"error_code": int(r.error), "error_message": r.message,
             "resource_type": r.resource_type, "resource_name": r.name} for r in results]}

    async def elect_leaders(self, body: ElectLeadersRequest,
                            version: int) -> ElectLeadersResponse:
        """Forwarded by a broker after its ACL check (Alter on the Cluster)."""
        if body["election_type"] not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "replica_election_results": []}
        asked = body["topic_partitions"]
        wanted = None if asked is None else list(dict.fromkeys(
            (t["topic"], p) for t in asked for p in t["partitions"]))
        results, records = self.state.elect_leaders(ElectionType(body["election_type"]),
                                                    wanted)
        await self.commit(records)
        by_topic: dict[str, ElectLeadersResponseReplicaElectionResult] = {}
        for r in results:
            by_topic.setdefault(r.topic, {"topic": r.topic, "partition_result": []})[
                "partition_result"].append({"partition_id": r.partition,
                                            "error_code": int(r.error),
                                            "error_message": r.message})
        return {"throttle_time_ms": 0, "error_code": 0,
                "replica_election_results": list(by_topic.values())}

    async def alter_reassignments(self, body: AlterPartitionReassignmentsRequest,
                                  version: int) -> AlterPartitionReassignmentsResponse:
        """Forwarded by a broker after its ACL check (Alter on the Cluster)."""
        results, records = self.state.alter_reassignments([
            (t["name"], p["partition_index"], p["replicas"])
            for t in body["topics"] for p in t["partitions"]])
        await self.commit(records)
        by_topic: dict[str, AlterPartitionReassignmentsResponseResponse] = {}
        for r in results:
            by_topic.setdefault(r.topic, {"name": r.topic, "partitions": []})[
                "partitions"].append({"partition_index": r.partition,
                                      "error_code": int(r.error), "error_message": r.message})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": list(by_topic.values())}

    async def list_reassignments(self, body: ListPartitionReassignmentsRequest,
                                 version: int) -> ListPartitionReassignmentsResponse:
        """The partitions in flight (of those asked; null: all), as their records say."""
        asked = (None if body["topics"] is None else
                 {(t["name"], p) for t in body["topics"] for p in t["partition_indexes"]})
        topics: dict[str, ListPartitionReassignmentsResponseTopic] = {}
        for name, index, s in self.state.image.reassigning():
            if asked is not None and (name, index) not in asked:
                continue
            topics.setdefault(name, {"name": name, "partitions": []})["partitions"].append({
                "partition_index": index, "replicas": list(s.replicas),
                "adding_replicas": list(s.adding_replicas),
                "removing_replicas": list(s.removing_replicas)})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "topics": list(topics.values())}

    async def metadata(self, body: MetadataRequest, version: int) -> MetadataResponse:
        image = self.state.image
        brokers: list[MetadataResponseBroker] = [
            {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
             "fenced": b.fenced} for _, b in sorted(image.brokers.items())]
        wanted = body["topics"]
        asked: list[MetadataRequestTopic] = ([{"name": n} for n in sorted(image.topics)]
                                             if wanted is None or (not wanted and version == 0)
                                             else wanted)
        topics: list[MetadataResponseTopic] = []
        for entry in asked:
            name = entry["name"]
            info = image.topics.get(name) if name is not None else None
            if info is None or name is None:
                code = (ErrorCode.UNKNOWN_TOPIC_ID if name is None
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                topics.append({"error_code": int(code), "name": name,
                               "topic_id": entry.get("topic_id", ZERO_UUID), "partitions": []})
                continue
            parts: list[MetadataResponsePartition] = []
            for index, s in sorted(info.partitions.items()):
                no_leader = s.leader == NO_LEADER
                parts.append({
                    "error_code": int(ErrorCode.LEADER_NOT_AVAILABLE if no_leader
                                      else ErrorCode.NONE),
                    "partition_index": index, "leader_id": s.leader,
                    "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                    "isr_nodes": list(s.isr),
                    "offline_replicas": [b for b in s.replicas if not image.is_alive(b)],
                    "unclean_elected": s.unclean_elected,
                    "offline_reason": (self.state.offline_reasons.get((name, index))
                                       if no_leader else None)})
            topics.append({"error_code": 0, "name": name, "partitions": parts,
                           "configs": [{"name": k, "value": v}
                                       for k, v in sorted(info.configs.items())]})
        return {"throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.config.cluster_id,
                "controller_id": -1, "topics": topics}

    async def fetch(self, body: FetchRequest, version: int) -> FetchResponse:
        if body["session_epoch"] not in (0, -1):  # incremental fetch: we keep no sessions
            return {"throttle_time_ms": 0, "session_id": 0, "responses": [],
                    "error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)}
        wanted = [(t["name"], p) for t in body["topics"] for p in t["partitions"]]
        ours = [p for name, p in wanted
                if name == METADATA_TOPIC and p["partition"] == METADATA_PARTITION]
        wait_ms = min(max(body["max_wait_ms"], 0), self.config.max_fetch_wait_ms)
        # (a voter that is not the active controller answers at once: NOT_LEADER_OR_FOLLOWER)
        if ours and wait_ms > 0 and self.active and len(ours) == len(wanted) and all(
                p["fetch_offset"] == self._readable_end() for p in ours):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.appended.wait(), wait_ms / 1000)
        budget = max(body["max_bytes"], 0)
        responses: dict[str, list[FetchResponsePartition]] = {}
        for name, p in wanted:
            entry, size = self._fetch_partition(name, p, budget)
            budget = max(0, budget - size)
            responses.setdefault(name, []).append(entry)
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"name": n, "partitions": ps} for n, ps in responses.items()]}

    async def describe_quorum(self, body: DescribeQuorumRequest,
                              version: int) -> DescribeQuorumResponse:
        """A quorum's voter: its view (:meth:`QuorumDriver.describe`).  The single
        controller: a quorum of one voter, itself, the leader (epoch 0), every record
        committed (high watermark = log end).  Another partition than
        ``__cluster_metadata``-0 gets UNKNOWN_TOPIC_OR_PARTITION (Kafka's answer)."""
        leo = self._readable_end()
        me: DescribeQuorumResponseCurrentVoter = {
            "replica_id": self.config.node_id, "log_end_offset": leo,
            "last_fetch_timestamp": -1, "last_caught_up_timestamp": -1}
        view: DescribeQuorumResponsePartition = {
            "partition_index": METADATA_PARTITION, "error_code": 0,
            "leader_id": self.config.node_id, "leader_epoch": 0, "high_watermark": leo,
            "current_voters": [me], "observers": []}
        if self.quorum is not None:
            described = cast(DescribeQuorumResponse, self.quorum.driver.describe())
            view = described["topics"][0]["partitions"][0]
        return _describe_quorum_answer(body, view)

    def _readable_end(self) -> int:
        """The end of what brokers may read: the log end (single controller, everything
        fsync'd) or the quorum's high watermark."""
        if self.quorum is not None:
            return self.quorum.high_watermark
        assert self.store is not None
        return self.store.log_end_offset

    def _read(self, offset: int, max_bytes: int) -> bytes:
        if self.quorum is not None:
            return self.quorum.read_committed(offset, max_bytes)
        assert self.store is not None
        return self.store.read(offset, max_bytes)

    def _fetch_partition(self, name: str, p: FetchRequestPartition, budget: int
                         ) -> tuple[FetchResponsePartition, int]:
        """The partition's answer and the bytes of records in it (a quorum's voter that
        is not the active controller: NOT_LEADER_OR_FOLLOWER)."""
        leo = self._readable_end()
        start = self.quorum.log_start_offset if self.quorum is not None else 0
        records = b""
        entry: FetchResponsePartition = {"partition_index": p["partition"], "error_code": 0,
                                         "high_watermark": leo, "last_stable_offset": leo,
                                         "log_start_offset": start}
        error = None
        if name != METADATA_TOPIC or p["partition"] != METADATA_PARTITION:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not self.active:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        elif not start <= p["fetch_offset"] <= leo:  # below: cut at a quorum snapshot
            error = ErrorCode.OFFSET_OUT_OF_RANGE
        elif p["fetch_offset"] < leo:
            records = self._read(p["fetch_offset"],
                                      min(budget, max(p["partition_max_bytes"], 0)))
        entry["records"] = records
        if error is not None:  # Kafka's error entry: no offsets
            entry.update({"error_code": int(error), "high_watermark": -1,
                          "last_stable_offset": -1, "log_start_offset": -1})
        return entry, len(records)


def _describe_quorum_answer(body: DescribeQuorumRequest, view: DescribeQuorumResponsePartition
                            ) -> DescribeQuorumResponse:
    """``view`` for every asked ``__cluster_metadata``-0, UNKNOWN_TOPIC_OR_PARTITION for
    any other partition (Kafka's answer)."""
    topics: list[DescribeQuorumResponseTopic] = []
    for t in body["topics"]:
        partitions: list[DescribeQuorumResponsePartition] = []
        for p in t["partitions"]:
            if (t["topic_name"], p["partition_index"]) == (METADATA_TOPIC, METADATA_PARTITION):
                partitions.append(view)
                continue
            partitions.append({
                "partition_index": p["partition_index"],
                "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "leader_id": -1,
                "leader_epoch": -1, "high_watermark": -1, "current_voters": [],
                "observers": []})
        topics.append({"topic_name": t["topic_name"], "partitions": partitions})
    return {"error_code": 0, "topics": topics}


def _registration_error(body: BrokerRegistrationRequest) -> tuple[ErrorCode, str] | None:
    """Why a BrokerRegistration is refused before it reaches the state: no listener, or a
    broker that cannot read this controller's metadata records (Kafka checks its
    finalized ``metadata.version`` the same way, with UNSUPPORTED_VERSION)."""
    names = [x["name"] for x in body["listeners"]]
    if names.count(INTERNAL_LISTENER) > 1 or len(names) - names.count(INTERNAL_LISTENER) != 1:
        return (ErrorCode.INVALID_REQUEST, "a broker registration needs one client listener "
                f"and at most one {INTERNAL_LISTENER} listener, got {names}")
    for feature in body["features"]:
        if feature["name"] == METADATA_VERSION_FEATURE:
            low, high = feature["min_supported_version"], feature["max_supported_version"]
            if low <= METADATA_VERSION <= high:
                return None
            return (ErrorCode.UNSUPPORTED_VERSION, f"the broker reads {METADATA_VERSION_FEATURE}"
                    f" {low}..{high}, the controller writes {METADATA_VERSION}")
    return (ErrorCode.UNSUPPORTED_VERSION,
            f"the broker does not declare the feature {METADATA_VERSION_FEATURE}")
