"""The offsets topic ``__consumer_offsets`` and the broker's group coordinator around it.

:class:`OffsetsTopic` glues the sans-IO :class:`GroupCoordinator` to a
:class:`BrokerCore`:

- **Creation on demand**: the first FindCoordinator that finds no offsets topic creates
  it (and answers COORDINATOR_NOT_AVAILABLE; the client retries).  Controller mode: a
  CreateTopics to the controller (one in flight at a time); standalone: locally.
  Partitions ``offsets_topic_num_partitions`` (default 5), replication factor
  ``min(offsets_topic_replication_factor, live brokers)``, configs
  ``cleanup_policy=compact``, ``min_insync_replicas=min(2, RF)``,
  ``segment_bytes=offsets_topic_segment_bytes``.
- **FindCoordinator**: the coordinator of a group is the leader of partition
  ``abs(javaStringHash(group_id)) % partitions`` (:func:`partition_for`; the partition
  count is the topic's, not this broker's config).  No leader, or a fenced one ->
  COORDINATOR_NOT_AVAILABLE.  Only groups (key_type 0) have coordinators here.
- **Leadership**: :meth:`on_partitions_changed` (called by the core after startup,
  topic creation/deletion and every metadata reconcile) compares the offsets
  partitions this broker leads (and their leader epochs) with what the coordinator
  owns: a new leadership (or a new epoch) starts a load, a lost one unloads the groups.
- **Loading** reads the partition from its log start to its log end offset in steps of
  ``LOAD_STEP_BYTES``, one step per timer tick, so a big partition never blocks the
  loop; the coordinator answers COORDINATOR_LOAD_IN_PROGRESS until the last step.
- **Writes** (:meth:`append`): one record batch (wall-clock timestamps) appended as
  leader with acks=all; the answer waits in the broker's produce purgatory until the
  high watermark passes the batch (or ``offsets_commit_timeout_ms``), exactly like a
  Produce with acks=all, and errors (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS...) go
  back to the coordinator, which maps them for its clients.

Costs: FindCoordinator O(group id length); ``on_partitions_changed`` O(partitions on
this broker); a load step O(LOAD_STEP_BYTES); an append is one log append.
Not thread-safe: the broker's event loop owns it (like the core).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker.delayed import DelayedProduce, ProducePartitionStatus
from broker.group.coordinator import GroupCoordinator
from broker.group.protocol import Done, GroupConfig, partition_for
from clients.protocol.api_keys import ApiKey
from clients.protocol.errors import ErrorCode, MiniKafkaError
from clients.records.batch import iter_batches
from clients.records.record import build_batch, decode_batch
from storage.log.log import wall_clock_ms
from timer.timing_wheel import CallableTask

if TYPE_CHECKING:
    from broker.core import BrokerCore

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_STEP_BYTES = 1024 * 1024
CREATE_TIMEOUT_MS = 10_000
Body = dict[str, Any]


class OffsetsTopic:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.coordinator = GroupCoordinator(GroupConfig.from_broker(core.config), core.clock,
                                            core.timer, self)
        self.coordinator.partition_exists = self.partition_exists
        self.creating = False
        self._tasks: set[asyncio.Task[None]] = set()

    # -- topic -------------------------------------------------------------------------

    def num_partitions(self) -> int:
        core = self.core
        if core.image is not None:
            info = core.image.topics.get(OFFSETS_TOPIC)
            return info.num_partitions if info is not None else 0
        registered = core.registry.get(OFFSETS_TOPIC)
        return registered.num_partitions if registered is not None else 0

    def partition_exists(self, topic: str, index: int) -> bool:
        core = self.core
        if core.controller_mode:
            return core.image is not None and core.image.partition(topic, index) is not None
        info = core.registry.get(topic)
        return info is not None and 0 <= index < info.num_partitions

    def _topic_spec(self, live_brokers: int) -> Body:
        config = self.core.config
        rf = max(1, min(config.offsets_topic_replication_factor, live_brokers))
        return {"name": OFFSETS_TOPIC, "num_partitions": config.offsets_topic_num_partitions,
                "replication_factor": rf, "assignments": [],
                "configs": {"cleanup_policy": "compact",
                            "min_insync_replicas": str(min(2, rf)),
                            "segment_bytes": str(config.offsets_topic_segment_bytes)}}

    def _create_topic(self) -> None:
        core = self.core
        if not core.controller_mode:
            spec = self._topic_spec(1)
            info = core.validate_new_topic(OFFSETS_TOPIC, spec["num_partitions"], 1,
                                           spec["configs"])
            core.create_topic(info)
            log.info("created %s with %d partitions", OFFSETS_TOPIC, info.num_partitions)
            return
        if self.creating or core.controller is None or core.image is None:
            return
        self.creating = True
        spec = self._topic_spec(len(core.image.unfenced_brokers()))

        async def create() -> None:
            try:
                answer = await core.controller.request(
                    ApiKey.CREATE_TOPICS, {"topics": [spec], "timeout_ms": CREATE_TIMEOUT_MS,
                                           "validate_only": False},
                    timeout_ms=CREATE_TIMEOUT_MS)
                code = answer["topics"][0]["error_code"]
                if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning("creating %s failed: %s %s", OFFSETS_TOPIC,
                                ErrorCode(code).name, answer["topics"][0]["error_message"])
                else:
                    log.info("created %s (RF %d)", OFFSETS_TOPIC, spec["replication_factor"])
            except MiniKafkaError as exc:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
            finally:
                self.creating = False

        task = asyncio.get_running_loop().create_task(create())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- FindCoordinator ---------------------------------------------------------------

    def find_coordinator(self, body: Body) -> Body:
        def error(code: ErrorCode, message: str) -> Body:
            return {"error_code": int(code), "error_message": message, "node_id": -1,
                    "host": "", "port": -1}

        if body["key_type"] != 0:
            return error(ErrorCode.INVALID_REQUEST, f"key_type {body['key_type']} is not "
                         "supported (only 0: groups)")
        if not body["key"]:
            return error(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        count = self.num_partitions()
        if count == 0:
            try:
                self._create_topic()
            except MiniKafkaError as exc:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"cannot create "
                             f"{OFFSETS_TOPIC}: {exc}")
            count = self.num_partitions()
            if count == 0:
                return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{OFFSETS_TOPIC} is being created")
        index = partition_for(body["key"], count)
        leader = self._leader_of(index)
        if leader is None:
            return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         f"{OFFSETS_TOPIC}-{index} has no leader")
        node_id, host, port = leader
        return {"error_code": 0, "error_message": None, "node_id": node_id, "host": host,
                "port": port}

    def _leader_of(self, index: int) -> tuple[int, str, int] | None:
        core = self.core
        if core.image is None:
            host, port = core.config.advertised
            return core.config.node_id, host, port
        state = core.image.partition(OFFSETS_TOPIC, index)
        broker = core.image.brokers.get(state.leader) if state is not None else None
        if state is None or broker is None or broker.fenced:
            return None
        return state.leader, broker.host, broker.port

    # -- leadership and loading ----------------------------------------------------------

    def on_partitions_changed(self) -> None:
        """Load the offsets partitions newly led here; unload those not led any more."""
        coordinator = self.coordinator
        coordinator.num_partitions = self.num_partitions()
        led = {index: p.leader_epoch for (topic, index), p in self.core.partitions.items()
               if topic == OFFSETS_TOPIC and p.is_leader}
        current = {**coordinator.owned, **coordinator.loading_epochs}
        for index, epoch in current.items():
            if led.get(index) != epoch:
                log.info("%s-%d: not led here any more (epoch %d); unloading groups",
                         OFFSETS_TOPIC, index, epoch)
                coordinator.unload(index)
        for index, epoch in led.items():
            if current.get(index) != epoch:
                log.info("%s-%d: leader in epoch %d; loading groups", OFFSETS_TOPIC, index,
                         epoch)
                coordinator.begin_load(index, epoch)
                start = self.core.partitions[(OFFSETS_TOPIC, index)].log_start_offset
                self._schedule_load(index, epoch, start)

    def _schedule_load(self, index: int, epoch: int, position: int) -> None:
        self.core.timer.add(CallableTask(1, lambda: self._load_step(index, epoch, position)))

    def _load_step(self, index: int, epoch: int, position: int) -> None:
        coordinator = self.coordinator
        partition = self.core.partitions.get((OFFSETS_TOPIC, index))
        if coordinator.loading_epochs.get(index) != epoch:
            return  # unloaded or reloaded meanwhile
        if partition is None or not partition.is_leader or partition.leader_epoch != epoch:
            coordinator.unload(index)
            return
        end = partition.log_end_offset
        try:
            data = partition.log.read(position, LOAD_STEP_BYTES, max_offset=end).read_bytes() \
                if position < end else b""
        except Exception:
            log.exception("%s-%d: load failed at offset %d; unloading", OFFSETS_TOPIC, index,
                          position)
            coordinator.unload(index)
            return
        if not data:
            coordinator.finish_load(index)
            return
        for pos, header in iter_batches(data, validate=False):
            if not header.is_control:
                for record in decode_batch(data, pos, validate=False):
                    coordinator.load_record(index, record.key, record.value, record.offset)
            position = header.next_offset
        self._schedule_load(index, epoch, position)

    # -- writes (the coordinator's OffsetsLog) ----------------------------------------------

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]],
               done: Done) -> None:
        core = self.core
        key = (OFFSETS_TOPIC, partition)
        replica = core.partitions.get(key)
        if replica is None or not replica.is_leader:
            done(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            return
        now = wall_clock_ms()
        batch = build_batch([(k, v, now, ()) for k, v in records])
        try:
            info = replica.append_records_as_leader(batch, -1,
                                                    core.min_insync_replicas(OFFSETS_TOPIC))
        except MiniKafkaError as exc:
            done(exc.code, -1)
            return
        core.fetch_purgatory.check_and_complete(key)  # followers may be waiting
        result: dict[str, Any] = {"error_code": 0}
        status = ProducePartitionStatus(replica, info.last_offset + 1, result,
                                        replica.leader_epoch)
        op = DelayedProduce(core.config.offsets_commit_timeout_ms, [status],
                            core.min_insync_replicas,
                            lambda: done(ErrorCode(result["error_code"]), info.first_offset))
        core.produce_purgatory.try_complete_else_watch(op, [key])

    def shutdown(self) -> None:
        self.coordinator.shutdown()
        for task in list(self._tasks):
            task.cancel()
