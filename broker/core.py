"""The broker's state, independent of processes and sockets (the sans-IO part).

:class:`BrokerCore` owns the LogManager, the partitions hosted here, the topic registry
and the produce/fetch purgatories.  The request handlers (:mod:`broker.handlers`) work
on it; the process adapter (:mod:`broker.server`) feeds it decoded requests and a clock,
and encodes what the handlers answer.  Tests drive a BrokerCore directly with a manual
clock: no sockets, no processes, no sleeping.

Standalone mode (no controller): this broker leads every partition of every topic in
its :class:`TopicRegistry`, at leader epoch 0, with an ISR of itself.

Controller mode (``config.controller_address`` set): topics, replicas, leaders and ISRs
come from the :class:`MetadataImage` the :class:`MetadataFollower` builds from the
controller's metadata log; :meth:`reconcile` makes every local replica leader or
follower as the image says and hands followers to the replica fetchers.  ISR changes
the leader wants are sent to the controller (AlterPartition) by ``send_alter_partition``.

The group coordinator and ``__consumer_offsets`` live in :attr:`groups`, an
:class:`~broker.group.offsets_topic.OffsetsTopic` the core creates and calls (after
partition changes, at shutdown); it asks the core back only through
:class:`~broker.group.offsets_topic.OffsetsTopicHost` (:meth:`partition_count`,
:meth:`partition_exists`, :meth:`leader_endpoint`, :meth:`live_broker_count`, topic
creation, ``min_insync_replicas``, the controller link).

Producer ids (InitProducerId) come from :attr:`producer_ids`: a block file in the data
directory when standalone, blocks from the controller otherwise (set by the server).
:meth:`write_checkpoints` (the checkpoint timer and shutdown) also forgets expired
producers and writes each partition's producer-state snapshot.

Not thread-safe: one event loop owns it (see docs/broker.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from broker.acls import Authorizer
from broker.auth import read_cluster_secret
from broker.config import BrokerConfig
from broker.delayed import DelayedFetch, DelayedProduce
from broker.group.offsets_topic import OffsetsTopic
from broker.metadata.image import MetadataImage
from broker.metadata.replica_plan import log_of_other_topic, plan_replicas
from broker.producer_ids import ProducerIdAllocator, StandaloneProducerIdAllocator
from broker.topic_registry import MAX_PARTITIONS_PER_TOPIC, StandaloneTopic, TopicRegistry
from broker.users import ScramUsers
from clients.protocol.errors import ErrorCode, InvalidConfigError, MiniKafkaError
from clients.protocol.topics import TopicPartition, topic_name_error
from replication.damage import DamageAction, on_damage_found
from replication.isr import AlterPartitionProposal
from replication.partition import Partition
from storage.checkpoint import CorruptCheckpointError
from storage.cleaner.config import CleanerConfig
from storage.config import LogConfig
from storage.log.log import Log
from storage.log_manager import LogManager
from storage.meta_properties import check_data_dir_identity
from storage.partition_metadata import read_topic_id, write_topic_id
from storage.scrubber import DamagedRange
from timer.clock import Clock
from timer.purgatory import Purgatory
from timer.system_timer import SystemTimer

log = logging.getLogger(__name__)


# topic configs that are not log settings (the controller validates them)
NON_LOG_CONFIGS = frozenset({"min_insync_replicas", "unclean_leader_election",
                             "replication_factor"})
# logs opened or created per event-loop turn by prepare_logs (7-10 ms a log on a slow disk)
LOG_OPENS_PER_TURN = 8
# Kafka's names whose snake_case form is not ours
TOPIC_CONFIG_ALIASES = {"unclean_leader_election_enable": "unclean_leader_election"}


class TopicError(MiniKafkaError):
    """An error about a topic as a whole, with the code given per instance."""


class BrokerCore:
    def __init__(self, config: BrokerConfig, clock: Clock, timer: SystemTimer) -> None:
        self.config = config
        self.cluster_secret = read_cluster_secret(config.cluster_secret_file)
        self.users = ScramUsers(config.sasl_users_file)
        self.authorizer = Authorizer(config.authorizer_enabled, config.acl_file,
                                     config.super_users)
        # replicas that recovery left below their checkpointed HW: (log end, HW)
        self.recovery_losses: dict[TopicPartition, tuple[int, int]] = {}
        # logs recovery cut (torn tail, bad batch, dropped segments) or left below their
        # checkpointed HW: reported at registration (broker/metadata/replica_logs.py)
        # until the replica is back in an ISR with a leader; kept on disk
        # (recovery-cut-checkpoint) so a restart before that still reports them
        self.recovery_cuts: set[TopicPartition] = set()
        # damaged ranges log recovery kept in place, waiting for their partition to be
        # hosted so that their repair can start (run_scrubber)
        self.recovery_damage: list[DamagedRange] = []
        self.clock = clock
        self.timer = timer
        self.data_dir = Path(config.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        check_data_dir_identity(self.data_dir, config.cluster_id, config.node_id)
        self.registry = TopicRegistry(self.data_dir)
        self.log_manager = LogManager(
            self.data_dir, self._default_log_config(), config_for=self.log_config_for,
            cleaner_config=CleanerConfig(
                dedupe_buffer_bytes=config.log_cleaner_dedupe_buffer_bytes,
                step_bytes=config.log_cleaner_step_bytes),
            scrub_step_bytes=max(4096, config.log_scrub_bytes_per_second
                                 * config.log_scrub_interval_ms // 1000),
            scrub_round_pause_ms=config.log_scrub_round_pause_ms)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory: Purgatory[DelayedProduce] = Purgatory("produce", timer)
        self.fetch_purgatory: Purgatory[DelayedFetch] = Purgatory("fetch", timer)
        # controller mode
        self.image: MetadataImage | None = None
        # set by the first reconcile: the image was complete (at the metadata log's HW)
        # and every hosted log took its topic's config
        self.image_reconciled = False
        self.hosted_topic_ids: dict[str, int] = {}
        # the configs of the hosted topics as apply_topic_configs last gave them to their
        # logs; min_insync_replicas reads them too, so that a topic's settings change at
        # one moment (not while an image is rebuilt after OFFSET_OUT_OF_RANGE: empty)
        self.applied_topic_configs: dict[str, dict[str, str]] = {}
        # leader replicas that resigned to repair a damaged range: (first bad offset, why)
        self.pending_repairs: dict[TopicPartition, tuple[int, str]] = {}
        self.fetchers: Any = None  # ReplicaFetcherManager, set by the server
        self.send_alter_partition: Callable[[AlterPartitionProposal], None] | None = None
        self.controller: Any = None  # AsyncConnection to the controller, set by the server
        self.alter_in_flight: set[TopicPartition] = set()
        self._checkpointed_hws: dict[TopicPartition, int] = {}
        # controller mode: the server replaces it with a ControllerProducerIdAllocator
        self.producer_ids: ProducerIdAllocator = StandaloneProducerIdAllocator(self.data_dir)
        # group coordinator and __consumer_offsets; asks this core (OffsetsTopicHost)
        self.groups = OffsetsTopic(config, clock, timer, self.partitions,
                                   self.produce_purgatory, self.fetch_purgatory, self)

    @property
    def controller_mode(self) -> bool:
        return bool(self.config.controller_address)

    # -- lifecycle -----------------------------------------------------------------

    def startup(self) -> None:
        if not self.controller_mode:
            self.registry.load()  # before the logs load: they take the topics' configs
        self.log_manager.startup()
        self._checkpointed_hws = self.log_manager.read_high_watermarks()
        self._report_recovery()
        if self.controller_mode:
            return  # partitions come from the metadata image (reconcile)
        high_watermarks = self._checkpointed_hws
        for info in self.registry.topics.values():
            for index in range(info.num_partitions):
                high_watermark = high_watermarks.get(TopicPartition(info.name, index), 0)
                self._host_partition(info.name, index, high_watermark)
        self.apply_topic_configs()
        self.groups.on_partitions_changed()

    def _report_recovery(self) -> None:
        """Say what log recovery did (nothing else reads its reports): every truncation,
        and every replica that now ends below the high watermark it had checkpointed -
        it lost records that were acknowledged (``recovery_losses``).  Both kinds are in
        ``recovery_cuts``, which the broker reports when it registers: the controller
        does not let such a replica lead while another may hold more.  A cut an earlier
        start made and did not get to save (killed in between) is still reported: its
        log's recovery-cut marker (:mod:`storage.log.recovery`) goes only once the mark
        is in ``recovery-cut-checkpoint``."""
        report = self.log_manager.startup_report
        if report is None:
            return
        # standalone, nothing elects: the cut is a status until the next restart
        stored: Collection[TopicPartition] = ()
        unreadable = False
        if self.controller_mode:
            try:
                stored = self.log_manager.read_recovery_cuts()
            except (CorruptCheckpointError, OSError) as exc:
                stored, unreadable = list(self.log_manager.all_logs()), True
                log.error("cannot read the recovery-cut checkpoint (%s): reporting every log "
                          "as cut, so none leads while another replica may hold more", exc)
        for key in sorted(stored):
            if self.log_manager.get_log(*key) is not None:
                self.recovery_cuts.add(key)  # cut before an earlier restart, not yet healed
                log.warning("%s-%d: log recovery cut this replica before an earlier restart "
                            "and it has not been back in an ISR since", *key)
        acknowledged = []  # logs whose recovery-cut marker goes once the mark is saved
        for key, found in sorted(report.recovered.items()):
            if found is not None and (found.truncated_bytes or found.segments_deleted):
                self.recovery_cuts.add(TopicPartition(*key))
                log.warning("%s-%d: recovery cut %d bytes (%d whole segments) at offset %s: %s",
                            *key, found.truncated_bytes, found.segments_deleted,
                            found.truncated_at_offset, "; ".join(found.problems))
            elif found is not None and found.cut_unacknowledged:
                # an earlier start cut it and stopped before it saved the mark
                self.recovery_cuts.add(TopicPartition(*key))
                log.warning("%s-%d: log recovery cut this replica at an earlier start, "
                            "which stopped before it recorded the cut", *key)
            if found is not None and found.cut_unacknowledged:
                acknowledged.append(TopicPartition(*key))
            if found is not None and found.damaged:
                # reported as cut (an uncut in-sync replica is preferred), with its
                # whole log end (broker/metadata/replica_logs.py says why)
                self.recovery_cuts.add(TopicPartition(*key))
                now_ms = self.clock.now_ms()
                for base, position, first_bad, end in found.damaged:
                    self.recovery_damage.append(DamagedRange(
                        key[0], key[1], base, position, first_bad,
                        "found by log recovery", now_ms))
                    log.warning("%s-%d: recovery found offsets [%d, %d) damaged in segment "
                                "%d; kept with every later segment, to be repaired from "
                                "another replica", *key, first_bad, end, base)
        for key, high_watermark in sorted(self._checkpointed_hws.items()):
            log_ = self.log_manager.get_log(*key)
            if log_ is not None and log_.log_end_offset < high_watermark:
                self.recovery_losses[key] = (log_.log_end_offset, high_watermark)
                self.recovery_cuts.add(key)
                log.error("%s-%d: after recovery the log ends at %d, below its checkpointed "
                          "high watermark %d: this replica lost acknowledged records "
                          "[%d, %d); other replicas may still hold them", *key,
                          log_.log_end_offset, high_watermark, log_.log_end_offset,
                          high_watermark)
        if self.controller_mode and (unreadable or self.recovery_cuts != set(stored)):
            self._save_recovery_cuts()  # before registering: a crash now keeps the marks
        for key in acknowledged:  # recorded above (standalone: reported in the log)
            log_ = self.log_manager.get_log(*key)
            if log_ is not None:
                log_.acknowledge_recovery_cut()

    def _save_recovery_cuts(self) -> None:
        """Replace the recovery-cut checkpoint with :attr:`recovery_cuts` (two fsyncs; only
        when the set changes: at startup after a cut, when a cut replica heals or goes).
        A failed write leaves the older file, whose extra marks only make the controller
        wait for more reports."""
        cuts = {}
        for key in self.recovery_cuts:
            log_ = self.log_manager.get_log(*key)
            cuts[key] = log_.log_end_offset if log_ is not None else 0
        self.log_manager.write_recovery_cuts(cuts)

    def _forget_recovery_cuts(self, keys: Collection[TopicPartition]) -> None:
        self.recovery_cuts.difference_update(keys)
        if not self.controller_mode:
            return
        try:
            self._save_recovery_cuts()
        except OSError:
            log.exception("cannot rewrite the recovery-cut checkpoint (dropping %s)",
                          sorted(keys))

    def shutdown(self) -> None:
        for partition in self.partitions.values():
            partition.abort_repair()  # its file goes; the next run's scrubber finds it again
        self.groups.shutdown()
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.write_checkpoints(final=True)
        self.log_manager.shutdown()

    def write_checkpoints(self, final: bool = False) -> None:
        """The checkpoint timer's work (and the shutdown's, ``final``: producer snapshots
        fsync'd only then, replication/producer_state_store.py says why)."""
        now_ms = self.clock.now_ms()  # producer expiry runs on the broker's clock
        for key, p in self.partitions.items():
            try:
                p.remove_expired_producers(now_ms)
                p.take_producer_snapshot(durable=final)
            except OSError:
                log.exception("%s-%d: cannot write the producer-state snapshot", *key)
        # a log not hosted yet (no metadata image so far) keeps the HW it had on disk
        kept = {key: hw for key, hw in self._checkpointed_hws.items()
                if key not in self.partitions and self.log_manager.get_log(*key) is not None}
        self.log_manager.write_high_watermarks(
            {**kept, **{key: p.high_watermark for key, p in self.partitions.items()}}
        )
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    def topic_configs_known(self) -> bool:
        """Whether hosted logs have their topics' configs: standalone, from the registry
        loaded at startup; with a controller, once a complete metadata image was
        reconciled (the metadata follower installs an empty image before it has fetched
        anything).  Until then logs are open with the broker's defaults, so retention and
        compaction wait (a topic kept forever, or compacted, must not be cleaned by the
        defaults)."""
        return not self.controller_mode or self.image_reconciled

    def run_retention(self) -> int:
        if not self.topic_configs_known():
            return 0
        return self.log_manager.run_retention(  # never at or above a partition's HW
            {key: p.high_watermark for key, p in self.partitions.items()})

    def flush_dirty_logs(self) -> None:
        self.log_manager.flush_dirty_logs()

    def run_log_cleaner(self) -> None:
        """One bounded compaction step (storage/cleaner.py); scheduled by the server.
        Tests call ``log_manager.clean_until_idle()`` to compact deterministically."""
        if self.topic_configs_known():
            self.log_manager.run_cleaner_step(high_watermarks={
                key: bound for key, p in self.partitions.items()
                if (bound := p.compaction_bound) is not None})

    def run_scrubber(self) -> list[DamagedRange]:
        """One bounded step of the background CRC check (storage/scrubber.py); what each
        damaged range found leads to is :func:`replication.damage.on_damage_found`'s rule:
        marked at once, then the segment is rewritten in place from the leader's copy (the
        replica fetcher's repair Fetches), keeping every later segment: they may hold the
        only intact copy of a range another replica finds damaged next.  A leader with
        other ISR members first resigns (AlterPartition with the ISR without itself) and
        repairs once it follows; alone in its ISR (or a partition not hosted) the damage
        is logged and kept in ``log_manager.scrubber.findings``: nobody holds a good copy
        to repair from.  A segment that cannot be repaired in place falls back to cutting
        the log before the damage and fetching the rest again (``pending_repairs`` holds
        that for a leader until it follows).  Damaged ranges that log recovery kept in
        place (``recovery_damage``) take the same way once their partition is hosted,
        with the scrubber off too."""
        recovered = self._recovery_damage_due()
        found = list(recovered)
        if self.config.log_scrub_bytes_per_second > 0:
            found += self.log_manager.run_scrub_step()
        for damage in found:
            key = TopicPartition(damage.topic, damage.partition)
            partition = self.partitions.get(key)
            if partition is None:
                log.error("%s-%d: offsets from %d on are damaged in this unhosted log; not "
                          "repaired", *key, damage.first_bad_offset)
                continue
            self.log_manager.cleaner.abort_pass_of(key)  # it would write the same files
            action, why = on_damage_found(partition, damage.segment_base_offset,
                                          damage.position, damage.first_bad_offset)
            if action is DamageAction.CUT:
                log.warning("%s-%d: %s", *key, why)
                self._cut_to_repair(key, partition, damage)
            elif action is DamageAction.RESIGN:
                self._resign_to_repair(key, partition, damage)
            elif action is DamageAction.QUEUED and damage in recovered:
                self.recovery_damage.append(damage)  # the scrubber would find it; try again
            elif action is DamageAction.REPAIR and partition.repair is not None:
                log.warning("%s-%d: offsets [%d, %d) are damaged (%s): rewriting that "
                            "segment from leader %d's copy, keeping the rest of the log",
                            *key, partition.repair.first_bad_offset,
                            partition.repair.end_offset, damage.reason, partition.leader_id)
        return found

    def _recovery_damage_due(self) -> list[DamagedRange]:
        """Recovery's damaged ranges whose partition is hosted now (the rest wait; those
        whose segment was repaired, cut or deleted since are dropped)."""
        due: list[DamagedRange] = []
        waiting: list[DamagedRange] = []
        for damage in self.recovery_damage:
            key = TopicPartition(damage.topic, damage.partition)
            log_ = self.log_manager.get_log(*key)
            if log_ is None or not any(s.base_offset == damage.segment_base_offset
                                       and s.damage is not None for s in log_.segments):
                continue
            (due if key in self.partitions else waiting).append(damage)
        self.recovery_damage = waiting
        return due

    def on_segment_repaired(self, key: TopicPartition, segment_base_offset: int) -> None:
        """A follower's damaged segment was written again from the leader's copy."""
        self.log_manager.scrubber.forget_findings(key, segment_base_offset)
        log.warning("%s-%d: damaged segment %d repaired from leader %d's copy", *key,
                    segment_base_offset,
                    self.partitions[key].leader_id if key in self.partitions else -1)

    def _cut_to_repair(self, key: TopicPartition, partition: Partition,
                       damage: DamagedRange) -> None:
        """The fallback: cut the log before the damage (as a follower; a leader resigns
        first and cuts once it follows)."""
        if partition.is_leader:
            self.pending_repairs[key] = (damage.first_bad_offset, damage.reason)
            self._resign_to_repair(key, partition, damage)
        else:
            self._repair_follower(key, partition, damage.first_bad_offset, damage.reason)

    def _repair_follower(self, key: TopicPartition, partition: Partition, offset: int,
                         reason: str) -> None:
        partition.truncate_to(offset)
        log.warning("%s-%d: damaged from offset %d (%s): truncated to %d, fetching the "
                    "rest again from leader %d", *key, offset, reason,
                    partition.log_end_offset, partition.leader_id)

    def _resign_to_repair(self, key: TopicPartition, partition: Partition,
                          damage: DamagedRange) -> None:
        others = [b for b in partition.isr if b != self.config.node_id]
        log.error("%s-%d: offsets from %d on are damaged on this leader (%s): %s", *key,
                  damage.first_bad_offset, damage.reason,
                  f"resigning to in-sync replicas {others}, then fetching the range again"
                  if others else "no other in-sync replica holds a copy to repair from "
                  "(it resigns if one joins)")
        self._try_resign(key, partition)

    def _try_resign(self, key: TopicPartition, partition: Partition) -> None:
        """Propose the ISR without this leader (it has a damaged range to repair); again
        from :meth:`check_isr_of` while a pending ISR change is in the way."""
        if key in self.alter_in_flight or not partition.is_leader:
            return
        others = tuple(b for b in partition.isr if b != self.config.node_id)
        proposal = partition.propose_isr(others) if others else None
        if proposal is not None:
            self._propose(key, proposal)

    # -- configs -------------------------------------------------------------------

    def _default_log_config(self) -> LogConfig:
        return LogConfig.from_dict(
            {k: v for k, v in self.config.log_defaults().items() if v is not None}
        )

    def topic_configs(self, topic: str) -> dict[str, str]:
        if self.image is not None:
            info = self.image.topics.get(topic)
            return dict(info.configs) if info else {}
        registered = self.registry.get(topic)
        return dict(registered.configs) if registered else {}

    def log_config_for(self, topic: str) -> LogConfig:
        overrides: dict[str, object] = dict(
            (k, v) for k, v in self.config.log_defaults().items() if v is not None
        )
        overrides.update((k.replace(".", "_"), v) for k, v in self.topic_configs(topic).items()
                         if k.replace(".", "_") not in NON_LOG_CONFIGS)
        return LogConfig.from_dict(overrides)  # type: ignore[arg-type]

    def partition_count(self, topic: str) -> int:
        """The topic's partition count in the cluster (0: no such topic)."""
        if self.image is not None:
            info = self.image.topics.get(topic)
            return info.num_partitions if info is not None else 0
        registered = self.registry.get(topic)
        return registered.num_partitions if registered is not None else 0

    def partition_exists(self, topic: str, index: int) -> bool:
        """Whether the cluster has the partition (hosted here or not)."""
        if self.controller_mode:
            return self.image is not None and self.image.partition(topic, index) is not None
        info = self.registry.get(topic)
        return info is not None and 0 <= index < info.num_partitions

    def leader_endpoint(self, topic: str, index: int) -> tuple[int, str, int] | None:
        """``(node_id, host, port)`` of the partition's leader; None when it has none or
        the leader is fenced.  Without a metadata image this broker leads everything."""
        if self.image is None:
            host, port = self.config.advertised
            return self.config.node_id, host, port
        state = self.image.partition(topic, index)
        broker = self.image.brokers.get(state.leader) if state is not None else None
        if state is None or broker is None or broker.fenced:
            return None
        return state.leader, broker.host, broker.port

    def live_broker_count(self) -> int | None:
        """Unfenced brokers in the metadata image (None: no image yet)."""
        return len(self.image.unfenced_brokers()) if self.image is not None else None

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's ``min_insync_replicas`` as applied to its hosted logs (see
        :meth:`apply_topic_configs`); for a topic not hosted here, as the image (or the
        registry) has it now."""
        applied = self.applied_topic_configs.get(topic)
        configs = {k.replace(".", "_"): v for k, v in
                   (applied if applied is not None else self.topic_configs(topic)).items()}
        raw = configs.get("min_insync_replicas")
        return int(raw) if raw is not None else self.config.min_insync_replicas

    # -- topics --------------------------------------------------------------------

    def validate_topic_configs(self, configs: Mapping[str, str]) -> dict[str, str]:
        """Check a topic's config overrides; return them normalized (snake_case keys).

        Keys are our names (``retention_ms``) or Kafka's dotted ones (``retention.ms``,
        ``unclean.leader.election.enable``); every :class:`LogConfig` setting,
        ``min_insync_replicas`` (>= 1) and ``unclean_leader_election`` (true/false) are
        accepted.  Anything else, or a bad value: :class:`TopicError` INVALID_CONFIG.
        """
        clean: dict[str, str] = {}
        for raw_key, value in configs.items():
            key = str(raw_key).strip().replace(".", "_").replace("-", "_")
            key = TOPIC_CONFIG_ALIASES.get(key, key)
            if value is None:
                raise TopicError(f"config {raw_key!r}: a null value is not supported",
                                 ErrorCode.INVALID_CONFIG)
            if key in clean:
                raise TopicError(f"config {raw_key!r} given twice", ErrorCode.INVALID_CONFIG)
            clean[key] = str(value).strip()
        min_isr = clean.pop("min_insync_replicas", None)
        unclean = clean.pop("unclean_leader_election", None)
        clean.pop("replication_factor", None)  # ours, in Metadata answers: not settable
        try:
            LogConfig.from_dict({**{k: v for k, v in self.config.log_defaults().items()
                                    if v is not None}, **clean})
            if min_isr is not None and int(min_isr) < 1:
                raise InvalidConfigError("min_insync_replicas must be >= 1")
        except InvalidConfigError as exc:
            raise TopicError(exc.message, ErrorCode.INVALID_CONFIG) from None
        except ValueError:
            raise TopicError(f"min_insync_replicas must be an integer, got {min_isr!r}",
                             ErrorCode.INVALID_CONFIG) from None
        if min_isr is not None:
            clean["min_insync_replicas"] = str(int(min_isr))
        if unclean is not None:
            if unclean.lower() not in ("true", "false"):
                raise TopicError(f"unclean_leader_election must be true or false, got "
                                 f"{unclean!r}", ErrorCode.INVALID_CONFIG)
            clean["unclean_leader_election"] = unclean.lower()
        return clean

    def validate_new_topic(
        self, name: str, num_partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> StandaloneTopic:
        reason = topic_name_error(name)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if name in self.registry.topics:
            raise TopicError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        if num_partitions == -1:
            num_partitions = self.config.num_partitions
        if not 1 <= num_partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise TopicError(
                f"num_partitions must be in 1..{MAX_PARTITIONS_PER_TOPIC}, got {num_partitions}",
                ErrorCode.INVALID_PARTITIONS,
            )
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
        if replication_factor != 1:
            raise TopicError(
                f"replication factor {replication_factor} is larger than the 1 available "
                "broker (standalone broker)",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        clean = self.validate_topic_configs(configs)
        return StandaloneTopic(name, num_partitions, replication_factor, clean)

    def create_topic(self, info: StandaloneTopic) -> None:
        self.registry.add(info)
        for index in range(info.num_partitions):
            self._host_partition(info.name, index, 0)
        self.apply_topic_configs()
        self.groups.on_partitions_changed()

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Standalone: replace the topic's config overrides (already validated) and apply
        them to its logs."""
        info = self.registry.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        info.configs = dict(configs)
        self.registry.add(info)
        self.apply_topic_configs()

    def add_partitions(self, name: str, count: int) -> None:
        """Standalone: grow the topic to ``count`` partitions (validated by the caller)."""
        info = self.registry.get(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        old = info.num_partitions
        info.num_partitions = count
        self.registry.add(info)
        for index in range(old, count):
            self._host_partition(name, index, 0)
        self.apply_topic_configs()
        self.groups.on_partitions_changed()

    def apply_topic_configs(self) -> None:
        """Give every hosted log, leader or follower, the config its topic has now: the
        one way a topic's settings reach its logs after they were opened (a config
        change, standalone or through the metadata image; every reconcile, so also the
        first after a restart, when the logs were opened with the broker's defaults).
        :meth:`Log.update_config` reaches the segments too.  Logs created later take
        the same :meth:`log_config_for` (the LogManager's ``config_for``)."""
        wanted: dict[str, LogConfig] = {}
        applied: dict[str, dict[str, str]] = {}
        for (topic, _), partition in self.partitions.items():
            config = wanted.get(topic)
            if config is None:
                try:
                    config = wanted[topic] = self.log_config_for(topic)
                except InvalidConfigError as exc:
                    log.warning("topic %s: config not applied: %s", topic, exc)
                    continue
                applied[topic] = self.topic_configs(topic)
            if partition.log.config != config:
                partition.log.update_config(config)
        self.applied_topic_configs = applied

    def delete_topic(self, name: str) -> None:
        info = self.registry.remove(name)
        if info is None:
            raise TopicError(f"unknown topic {name!r}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        keys = [TopicPartition(name, index) for index in range(info.num_partitions)]
        for key in keys:
            partition = self.partitions.pop(key, None)
            if partition is not None:
                partition.leader_id = -1  # parked produces fail with NOT_LEADER
            self.log_manager.delete_log(*key)
        for key in keys:  # once the whole topic is gone: a parked fetch of several
            self.wake_partition(key)  # partitions answers UNKNOWN_TOPIC for each
        self.applied_topic_configs.pop(name, None)
        self.groups.on_partitions_changed()

    def _host_partition(self, topic: str, index: int, high_watermark: int) -> None:
        log_ = self.log_manager.get_log(topic, index) or self.log_manager.create_log(topic, index)
        partition = Partition(topic, index, log_, local_broker_id=self.config.node_id)
        partition.high_watermark = min(high_watermark, log_.log_end_offset)
        partition.make_leader(0, [self.config.node_id], [self.config.node_id])
        self.partitions[TopicPartition(topic, index)] = partition

    def partition_or_error(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get(TopicPartition(topic, index))
        if partition is not None:
            return partition
        reason = topic_name_error(topic)
        if reason is not None:
            raise TopicError(reason, ErrorCode.INVALID_TOPIC_EXCEPTION)
        if self.image is not None and self.image.partition(topic, index) is not None:
            raise TopicError(f"broker {self.config.node_id} holds no replica of "
                             f"{topic}-{index}", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        raise TopicError(f"unknown topic or partition {topic}-{index}",
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)

    def wake_partition(self, key: TopicPartition) -> None:
        """Something changed on the partition: let parked produces and fetches re-check."""
        self.produce_purgatory.check_and_complete(key)
        self.fetch_purgatory.check_and_complete(key)

    # -- controller mode -------------------------------------------------------------

    async def prepare_logs(self, per_turn: int = LOG_OPENS_PER_TURN) -> None:
        """Open or create the logs of the replicas the image adds here, ahead of
        :meth:`reconcile`, giving the event loop a turn after every ``per_turn`` of them.

        Creating a log is a directory, three segment files and a ``partition.metadata``
        (file creations cost ~0.7 ms each on the 2-core test machine's disk); for a new
        topic of 200 partitions (RF 3, 3 brokers) the one synchronous reconcile held a
        broker's loop for ~1.8 s, next to a local cluster's 2 s heartbeat session.
        Same decision as reconcile's (``_log_for_topic_id`` on the same image, which only
        the metadata follower's task changes); replicas already hosted are left to it.
        """
        image = self.image
        if image is None:
            return
        plan = plan_replicas(image, self.config.node_id, list(self.partitions),
                             self.hosted_topic_ids)
        opened = 0
        for key, (topic_id, _) in plan.host.items():
            if key in self.partitions:
                continue
            self._log_for_topic_id(key, topic_id)
            opened += 1
            if opened % per_turn == 0:
                await asyncio.sleep(0)

    def reconcile(self) -> None:
        """Make local replicas match the metadata image (after new records were applied)."""
        image = self.image
        assert image is not None
        me = self.config.node_id
        plan = plan_replicas(image, me, list(self.partitions), self.hosted_topic_ids)
        wanted = {key: state for key, (_, state) in plan.host.items()}
        # marks that end here: not a replica any more (the image is complete), or back
        # in the ISR with a leader (healed); one checkpoint rewrite for all of them
        done_cuts = [key for key in self.recovery_cuts if key not in wanted
                     or (me in wanted[key].isr and wanted[key].leader >= 0)]
        if done_cuts:
            self._forget_recovery_cuts(done_cuts)
        # parked produces/fetches are woken once the whole image is applied, so a fetch
        # of several partitions is answered from the new state of all of them
        woken: list[TopicPartition] = []
        for key in plan.drop:
            self._drop_partition(key)
            woken.append(key)
        for key, (topic_id, state) in plan.host.items():
            topic, index = key
            self.hosted_topic_ids[topic] = topic_id
            partition = self.partitions.get(key)
            if partition is None:
                log_ = self._log_for_topic_id(key, topic_id)
                partition = Partition(topic, index, log_, local_broker_id=me)
                partition.high_watermark = min(self._checkpointed_hws.get(key, 0),
                                               log_.log_end_offset)
                self.partitions[key] = partition
            if state.leader == me:
                if partition.make_leader(state.leader_epoch, state.replicas, state.isr,
                                         state.partition_epoch, now_ms=self.clock.now_ms()):
                    log.info("%s-%d: leader in epoch %d", topic, index, state.leader_epoch)
                if self.fetchers is not None:
                    self.fetchers.unfollow(key)
            else:
                changed = partition.make_follower(state.leader, state.leader_epoch,
                                                  state.replicas, state.partition_epoch,
                                                  state.isr)
                repair = self.pending_repairs.pop(key, None) if state.leader >= 0 else None
                if repair is not None:  # resigned to repair: cut, then fetch it again
                    self._repair_follower(key, partition, *repair)
                leader = image.brokers.get(state.leader)
                if changed and self.fetchers is not None:
                    if leader is not None and state.leader >= 0:
                        self.fetchers.follow(partition, *leader.replication_endpoint)
                    else:
                        self.fetchers.unfollow(key)
            woken.append(key)
        self.apply_topic_configs()
        self.image_reconciled = True
        for key in woken:
            self.wake_partition(key)
        self.groups.on_partitions_changed()

    def _log_for_topic_id(self, key: TopicPartition, topic_id: int) -> Log:
        """The log to host ``key`` of topic ``topic_id``: the one on disk when its
        ``partition.metadata`` names that topic (or nothing: adopted), else - a topic of
        the same name deleted while this broker was away - a new, empty one."""
        log_ = self.log_manager.get_log(*key)
        found = None if log_ is None else read_topic_id(log_.dir)
        if log_ is not None and log_of_other_topic(found, topic_id):
            log.warning("%s-%d: the log on disk belongs to topic id %d, deleted since; "
                        "removing it, topic id %d starts empty", *key, found, topic_id)
            self.log_manager.delete_log(*key)
            log_ = None
            if key in self.recovery_cuts:
                self._forget_recovery_cuts([key])  # the cut log is gone
        if log_ is None:
            log_ = self.log_manager.create_log(*key)
        if found != topic_id:
            write_topic_id(log_.dir, topic_id)
        return log_

    def _drop_partition(self, key: TopicPartition) -> None:
        """Stop hosting ``key`` and delete its log (unless its ``partition.metadata``
        names another topic id than the one hosted: then it is left on disk and reported);
        the caller wakes its parked operations (they answer NOT_LEADER_OR_FOLLOWER /
        UNKNOWN_TOPIC_OR_PARTITION)."""
        partition = self.partitions.pop(key)
        if key in self.recovery_cuts:
            self._forget_recovery_cuts([key])  # a later log of this name starts afresh
        if self.fetchers is not None:
            self.fetchers.unfollow(key)
        partition.leader_id = -1  # parked produces fail with NOT_LEADER
        partition.abort_repair()
        hosted, found = self.hosted_topic_ids.get(key[0]), read_topic_id(partition.log.dir)
        if hosted is not None and found is not None and found != hosted:
            log.error("%s-%d: not deleting %s: it belongs to topic id %d, not the hosted %d",
                      *key, partition.log.dir, found, hosted)
            return
        self.log_manager.delete_log(*key)
        log.info("%s-%d: replica removed", *key)

    def on_follower_progress(self, key: TopicPartition) -> None:
        """A follower replica appended data (nothing waits on followers yet)."""

    def check_isr(self) -> None:
        """Leader duty: propose dropping lagging followers; resend unanswered proposals."""
        for key in self.partitions:
            self.check_isr_of(key)

    def check_isr_of(self, key: TopicPartition) -> None:
        """:meth:`check_isr` for one partition (also right after a follower fetched from
        below the HW: it lost committed records and leaves the ISR at once)."""
        partition = self.partitions.get(key)
        if partition is None or not partition.is_leader or key in self.alter_in_flight:
            return
        if ((key in self.pending_repairs or partition.repair is not None)
                and partition.pending_alter_partition is None):
            self._try_resign(key, partition)
            return
        proposal = (partition.pending_alter_partition
                    or partition.maybe_shrink_isr(self.clock.now_ms(),
                                                  self.config.replica_lag_time_max_ms))
        if proposal is not None:
            self._propose(key, proposal)

    def maybe_expand_isr(self, key: TopicPartition, replica_id: int) -> None:
        partition = self.partitions.get(key)
        if partition is None or key in self.alter_in_flight:
            return
        proposal = partition.maybe_expand_isr(replica_id)
        if proposal is not None:
            self._propose(key, proposal)

    def _propose(self, key: TopicPartition, proposal: AlterPartitionProposal) -> None:
        if self.send_alter_partition is None:
            return
        self.alter_in_flight.add(key)
        self.send_alter_partition(proposal)

    def on_alter_partition_answer(self, proposal: AlterPartitionProposal, error_code: int,
                                  isr: list[int] | None, partition_epoch: int | None) -> None:
        key = TopicPartition(proposal.topic, proposal.partition)
        self.alter_in_flight.discard(key)
        partition = self.partitions.get(key)
        if partition is None:
            return
        if partition.on_alter_partition_response(proposal, error_code, isr, partition_epoch):
            log.info("%s-%d: ISR now %s", *key, partition.isr)
        self.wake_partition(key)
