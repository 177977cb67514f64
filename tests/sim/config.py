"""The simulation's knobs (:class:`SimConfig`, one dataclass of probabilities, timeouts and
sizes; bench/sim.py's modes are presets of it) and :class:`SimFailure`, the error an
invariant raises with the seed, a replay command and the last events.

Plain data: no I/O, no randomness; one instance per :class:`tests.sim.cluster.SimCluster`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from replication.truncation import TruncationPolicy


class SimFailure(AssertionError):
    """An invariant broke; the message carries the seed and the recent events."""


@dataclass
class SimConfig:
    brokers: int = 3
    partitions: int = 2
    no_loss: bool = True
    real_log_dir: Path | None = None      # the logs' directory (None: a fresh one on tmpfs)
    truncation_policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH
    min_insync_replicas: int = 2
    heartbeat_interval_ms: int = 20
    session_timeout_ms: int = 120
    replica_lag_time_max_ms: int = 150
    isr_check_interval_ms: int = 30
    request_timeout_ms: int = 60
    replica_fetch_wait_max_ms: int = 25       # a follower Fetch's max_wait_ms (parks)
    fetch_backoff_ms: int = 20                # a follower session's backoff after errors
    produce_timeout_ms: int = 400
    fetch_max_bytes: int = 4096
    drop_probability: float = 0.02
    max_delay_ms: int = 12
    crash_probability: float = 0.004
    restart_probability: float = 0.02
    partition_probability: float = 0.003
    heal_probability: float = 0.01
    leader_move_probability: float = 0.002   # a preferred-leader election now
    leader_imbalance_check_interval_ms: int = 400
    controller_crash_probability: float = 0.0005  # per step; down 20-200 ms, replays its log
    consume_probability: float = 0.2      # a consumer Fetch (replica_id -1) to a leader
    produce_probability: float = 0.3
    flush_probability: float = 0.05       # lossy mode: chance per tick to flush a log
    heal_steps: int = 1500
    check_truncation: bool = True         # off: only loss/divergence, not early truncation
    idempotent: bool = False              # the producer: idempotent, retrying until acked
    # retention: per tick and replica, the chance that it deletes its oldest segments
    # (Log.delete_old_segments(HW), sizes below); 0: never (no random number drawn, so
    # seeds without it replay as before)
    retention_probability: float = 0.0
    # with retention: segment size, retention_bytes in segments (half a segment: about
    # six batches kept, so a broker down a while comes back below its leader's log
    # start), and segments rolled by time too (small ones)
    retention_segment_bytes: int = 1024
    retention_segments: float = 0.5
    retention_segment_ms: int = 50
    # per step, the chance that a byte of a closed segment of one replica rots
    # (only while every other replica of that partition is intact, so a good copy of
    # every record exists); the broker's scrubber finds it at once (and again after a
    # restart) and the replica repairs it in place; 0: never (no random number drawn)
    rot_probability: float = 0.0
    consumer_rewind_probability: float = 0.0  # per consumer Fetch: read again from offset 0
    rot_segment_bytes: int = 2048           # with rot: segment size
    # per step, the chance that a live broker pauses (SIGSTOP, a long GC) for
    # pause_min_ms..pause_max_ms: it handles nothing and its timers stand still; messages
    # to it wait; it resumes with the view it had (a zombie leader, fenced meanwhile when
    # the pause outlasts its session); 0: never (no random number drawn)
    pause_probability: float = 0.0
    pause_min_ms: int = 30
    pause_max_ms: int = 400
    # the brokers' metadata Fetches: an answer carries every record from the offset asked
    # for, except with this probability 1..metadata_max_records of them (a broker
    # catching up then applies partial images and must act on the complete one only)
    metadata_partial_probability: float = 0.3
    metadata_max_records: int = 4
    metadata_max_wait_ms: int = 40          # the controller's long poll (below the
    #                                         request timeout the broker resends after)
    # compaction: the topic is compacted (cleanup.policy=compact, small
    # segments, so that the HW lags by whole segments at times); per tick, the chance
    # that a broker's real LogCleaner runs one bounded step (compaction_step_bytes)
    # below each replica's Partition.compaction_bound (its HW; BrokerCore's rule); the
    # producer writes keys k0..k<compaction_keys - 1>, a tombstone (null value) with
    # compaction_tombstone_probability (delete.retention.ms stays 24 h: tombstones are
    # stamped, never dropped, in a run); every record a step removes must have a later
    # one of its key below that replica's HW (InvariantChecker.check_compacted), and kept
    # records are checked record by record; 0: never (no random number drawn)
    compaction_probability: float = 0.0
    compaction_keys: int = 6
    compaction_tombstone_probability: float = 0.1
    compaction_segment_bytes: int = 1024
    compaction_segment_ms: int = 40        # and rolled by time (records' CreateTime)
    compaction_step_bytes: int = 1024
    # per step, the chance that the operator deletes the topic (DeleteTopics through the
    # real controller); it is created again (a new topic id, leader epochs from 0) once
    # every broker is up; a broker that was away comes back with the old topic's logs
    # and must delete them (its partition.metadata names the old id), and nobody may
    # serve or elect from them; the oracle starts over with the new topic; 0: never
    topic_recreate_probability: float = 0.0
    # per step, the chance of a whole-cluster crash (issue 30, item 11): every broker is
    # killed at once; once the controller has fenced them all (one by one, as their
    # sessions expire) the last ISR member of one partition - its only one now - gets its
    # log's tail torn (recovery cuts it: it lacks records it had acknowledged as an ISR
    # member); the brokers come back in a random order, gaps of 0..2 sessions apart, and
    # half the time the cut one is killed and restarted once more before the others are
    # all back; random crashes and restarts wait until the last scheduled start; 0:
    # never (no random number drawn)
    cluster_crash_probability: float = 0.0
    # transactions (issue 32): the workload is a transactional producer and a
    # read_committed consumer (tests.sim.txn_workload) against the real transaction
    # coordinator (tests.sim.txn_coordinator); per step, the chance that the producer
    # restarts (InitProducerId again, fencing its open transaction); the chance that a
    # transaction ends in an abort (a hundredth of it per step: aborted early, batches unacked);
    # records per partition per transaction 1..txn_max_records
    transactions: bool = False
    txn_restart_probability: float = 0.003
    txn_abort_probability: float = 0.3
    txn_max_records: int = 3
    transaction_timeout_ms: int = 2000
    # per EndTxn and per WriteTxnMarkers request: the chance that a copy of it arrives
    # again 50-400 ms later (KAFKA-17754: the same request on another connection)
    txn_late_copy_probability: float = 0.2
    # per produce step of an open transaction: the chance that the producer also sends
    # a transactional batch (its id and epoch, sequence 0) to a partition it did not add
    # to the transaction; KIP-890 part 1 verification must refuse it (a hanging
    # transaction otherwise); 0: never (no random number drawn)
    txn_stray_probability: float = 0.01
    # per step, the chance that the broker leading the state partition (the
    # transaction coordinator) crashes; the next leader loads the state at its leader
    # epoch; 0: never (no random number drawn)
    txn_coordinator_move_probability: float = 0.0
