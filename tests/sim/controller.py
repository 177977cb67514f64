"""The controller in the simulation: the real :class:`ControllerState` behind a thin adapter.

What the adapter does is what :mod:`broker.controller.server` does around the same core,
minus sockets and the metadata log's fsync (the simulated controller never crashes, so
its image is its log): it turns the simulated messages into calls on the core - broker
registration (with each log's report for the safe election), heartbeats (the broker's
``broker_epoch`` and the metadata offset it applied; a stale epoch answers "register
again"), AlterPartition, the periodic tick (session expiry, preferred leaders) - and answers the
brokers' metadata Fetches from the log it appended (:meth:`metadata_answer`; the
cluster parks a Fetch at the log end until a record arrives or its wait ends, the
controller's long poll).  Each broker reads that log with the real
:class:`~broker.metadata.log_reader.MetadataLogReader` into a real
:class:`~broker.metadata.image.MetadataImage`.

The topic (``t``, replicas in rotating order, RF = brokers) is created with the real
CreateTopics path once every broker is registered and unfenced, as an operator would
after start; :meth:`delete_topic` deletes it with the real DeleteTopics path, and it is
created again (under a new topic id) the same way.

:meth:`restart` is a controller process restart: a fresh core replays the records this
adapter appended (its metadata log).

Costs: each call is the core's; an answer O(records in it); a restart O(records).  Single-threaded,
like everything in the simulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from broker.controller.config import ControllerConfig
from broker.controller.results import IsrChange, ReplicaLog, TopicSpec
from broker.controller.state import ControllerState
from broker.metadata.image import PartitionRegistration
from broker.metadata.records import MetadataRecord, encode_record
from broker.metadata.replica_plan import TopicLabel, partition_metadata_label
from clients.protocol.errors import ErrorCode
from clients.records.record import build_batch
from timer.clock import ManualClock

TOPIC = "t"


class SimController:
    """The real controller core and its message adapter (see the module docstring)."""

    def __init__(self, clock: ManualClock, broker_ids: Sequence[int], partitions: int,
                 session_timeout_ms: int, leader_imbalance_check_interval_ms: int,
                 min_insync_replicas: int) -> None:
        config = ControllerConfig(
            broker_session_timeout_ms=session_timeout_ms,
            leader_imbalance_check_interval_ms=leader_imbalance_check_interval_ms,
            auto_leader_rebalance_enable=True, min_insync_replicas=min_insync_replicas,
            default_replication_factor=len(broker_ids))
        self.config, self.clock = config, clock
        self.state = ControllerState(config, clock)
        self.log: list[MetadataRecord] = []  # the metadata log (record i at offset i)
        self._encoded: list[bytes] = []  # record i's encoding (encode_record), made once
        # (first, end) -> the batch of records [first, end) as metadata_answer sends it
        # (every restarted broker reads the log again from 0; at most 1,000 kept)
        self._batches: dict[tuple[int, int], bytes] = {}
        self.restarts = 0
        self.broker_ids = list(broker_ids)
        self.partitions = partitions
        self.history: list[str] = []
        self.topic_created = False

    # -- views for the simulation's invariants --------------------------------------------

    def partition(self, pid: int) -> PartitionRegistration | None:
        return self.state.image.partition(TOPIC, pid)

    def leader(self, pid: int) -> int:
        p = self.partition(pid)
        return -1 if p is None else p.leader

    def live(self, broker: int) -> bool:
        return self.state.image.is_alive(broker)

    def metadata_answer(self, offset: int, max_records: int) -> dict[str, Any]:
        """The controller's answer to a broker's metadata Fetch from ``offset``: at most
        ``max_records`` records of the log as Kafka record batches (the real encoding,
        :mod:`broker.metadata.records`) and the high watermark (the log end: the adapter
        appends records once they are applied).  An offset past the end is
        OFFSET_OUT_OF_RANGE, as the real controller answers."""
        if offset > len(self.log):
            return {"error": int(ErrorCode.OFFSET_OUT_OF_RANGE), "records": b"",
                    "high_watermark": len(self.log)}
        encoded = self._encoded
        for record in self.log[len(encoded):]:
            encoded.append(encode_record(record))
        end = min(offset + max_records, len(encoded))
        data = self._batches.get((offset, end), b"") if end > offset else b""
        if not data and end > offset:  # (the log only grows: a range's batch never changes)
            if len(self._batches) >= 1000:
                self._batches.clear()
            data = self._batches[(offset, end)] = build_batch(
                [(None, value, 0, ()) for value in encoded[offset:end]], base_offset=offset)
        return {"error": 0, "records": data, "high_watermark": len(self.log)}

    # -- calls ---------------------------------------------------------------------------

    def _note(self, what: str, records: list[MetadataRecord]) -> bool:
        """Append the records the core produced to the log (the adapter's fsync)."""
        assert len(self.log) + len(records) == self.state.image.last_applied_offset + 1
        self.log.extend(records)
        for r in records:
            self.history.append(f"{what}: {type(r).__name__} {_fields(r)}")
        return bool(records)

    def restart(self) -> None:
        """A new controller process: a fresh core replays the log, as at startup
        (sessions, log reports and pending shutdowns were in the old one's memory)."""
        self.state = ControllerState(self.config, self.clock)
        for offset, record in enumerate(self.log):
            self.state.replay(record, offset)
        self.restarts += 1
        self.history.append(f"restart: replayed {len(self.log)} records")

    def register(self, broker: int, incarnation: int, logs: list[ReplicaLog]
                 ) -> tuple[ErrorCode, int]:
        """(error, broker_epoch)."""
        result, records = self.state.register_broker(broker, f"inc-{incarnation}", "sim",
                                                     9000 + broker, replica_logs=logs)
        self._note(f"register b{broker}", records)
        if result.error == ErrorCode.NONE:
            self._maybe_create_topic()
        return result.error, result.broker_epoch

    def _maybe_create_topic(self) -> bool:
        if self.topic_created or not all(self.live(b) for b in self.broker_ids):
            return False
        n = len(self.broker_ids)
        assignments = {pid: self.broker_ids[pid % n:] + self.broker_ids[:pid % n]
                       for pid in range(self.partitions)}
        results, records = self.state.create_topics([TopicSpec(TOPIC, assignments=assignments)])
        assert results[0].error == ErrorCode.NONE, results
        self.topic_created = True
        return self._note("create topic", records)

    def delete_topic(self) -> bool:
        """The operator's DeleteTopics; the topic is created again (a new id) once every
        broker is up (:meth:`_maybe_create_topic`)."""
        if not self.topic_created:
            return False
        results, records = self.state.delete_topics([TOPIC])
        assert results[0].error == ErrorCode.NONE, results
        self.topic_created = False
        return self._note("delete topic", records)

    def topic_id(self) -> TopicLabel | None:
        """The id of the topic (as brokers label what they host), None: none."""
        topic = self.state.image.topics.get(TOPIC)
        return None if topic is None else partition_metadata_label(topic)

    def heartbeat(self, broker: int, broker_epoch: int, metadata_offset: int
                  ) -> tuple[ErrorCode, bool]:
        """(error, the controller wants a fresh log report)."""
        result, records = self.state.heartbeat(broker, broker_epoch, metadata_offset)
        self._note(f"heartbeat b{broker}", records)
        self._maybe_create_topic()
        return result.error, result.report_replica_logs

    def alter_partition(self, broker: int, broker_epoch: int, pid: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]
                        ) -> tuple[ErrorCode, PartitionRegistration | None]:
        (error, results), records = self.state.alter_partition(
            broker, broker_epoch, [IsrChange(TOPIC, pid, leader_epoch, new_isr,
                                             partition_epoch)])
        self._note(f"alter p{pid} by b{broker}", records)
        if error != ErrorCode.NONE:
            return error, self.partition(pid)
        return results[0].error, results[0].state

    def tick(self) -> bool:
        return self._note("tick", self.state.tick())

    def elect_preferred_leaders(self) -> bool:
        return self._note("preferred election", self.state.elect_preferred_leaders())


def _fields(record: MetadataRecord) -> str:
    slots = getattr(record, "__slots__", ())
    names = slots if slots else list(getattr(record, "__dataclass_fields__", {}))
    return " ".join(f"{n}={getattr(record, n)}" for n in names)
