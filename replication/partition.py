"""One partition replica on this broker: its log, its role, HW/LEO and the ISR.

The leader keeps, for each follower, the follower's log end offset (LEO) as last
reported by a Fetch and the last time it was caught up.  The high watermark (HW) is the
minimum LEO over the ISR, never above the leader's LEO and never moving backwards while
this replica leads.  Consumers read below HW; followers read below the leader's LEO.

In a standalone broker (no controller) every partition has one replica, so the ISR is
``{local}`` and HW follows LEO on every append.  The follower role (replica fetcher,
truncation by leader epoch) plugs in through :meth:`make_follower` and
:meth:`append_records_as_follower` without changing the leader path.

Costs: append is the log's cost plus O(|ISR|) for the HW update; a follower fetch update
is O(|ISR|).  Not thread-safe: owned by the broker's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clients.errors import ErrorCode, MiniKafkaError
from storage.log import FetchDataInfo, Log, LogAppendInfo


class NotLeaderError(MiniKafkaError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class NotEnoughReplicasError(MiniKafkaError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class FencedLeaderEpochError(MiniKafkaError):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(MiniKafkaError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


@dataclass
class FollowerState:
    log_end_offset: int = 0
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    local_broker_id: int
    leader_id: int = -1
    leader_epoch: int = 0
    partition_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0
    followers: dict[int, FollowerState] = field(default_factory=dict)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -- role changes --------------------------------------------------------------

    def make_leader(
        self, leader_epoch: int, replicas: list[int], isr: list[int], partition_epoch: int = 0
    ) -> None:
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.followers = {r: FollowerState() for r in replicas if r != self.local_broker_id}
        # A new leader never lowers HW; it starts from what it knew as follower.
        self.high_watermark = min(max(self.high_watermark, 0), self.log_end_offset)
        self.maybe_increment_high_watermark()

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int]) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.followers = {}

    # -- leader path ---------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request that carries another view of the leader epoch (-1 = none)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"{self.topic}-{self.index}: request epoch {current_leader_epoch} is older "
                f"than the current leader epoch {self.leader_epoch}"
            )
        raise UnknownLeaderEpochError(
            f"{self.topic}-{self.index}: request epoch {current_leader_epoch} is newer "
            f"than this replica's {self.leader_epoch}"
        )

    def append_records_as_leader(
        self, batches: bytes | memoryview, required_acks: int, min_insync_replicas: int
    ) -> LogAppendInfo:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of "
                                 f"{self.topic}-{self.index}")
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.index}: ISR {self.isr} is smaller than "
                f"min_insync_replicas {min_insync_replicas}"
            )
        info = self.log.append_as_leader(batches, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return info

    def read_records(
        self, fetch_offset: int, max_bytes: int, *, for_follower: bool, min_one_batch: bool = True
    ) -> FetchDataInfo:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of "
                                 f"{self.topic}-{self.index}")
        upper = self.log_end_offset if for_follower else self.high_watermark
        return self.log.read(fetch_offset, max_bytes, max_offset=upper,
                             min_one_batch=min_one_batch)

    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """Record a follower's fetch; returns True when the HW moved."""
        state = self.followers.get(replica_id)
        if state is None:
            return False
        state.log_end_offset = fetch_offset
        state.last_fetch_time_ms = now_ms
        if fetch_offset >= self.log_end_offset:
            state.last_caught_up_time_ms = now_ms
        return self.maybe_increment_high_watermark()

    def acked_by_isr(self, required_offset: int) -> bool:
        """True once every ISR member has everything below ``required_offset``."""
        return self.high_watermark >= required_offset

    def maybe_increment_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        candidates = [self.log_end_offset]
        for replica in self.isr:
            if replica != self.local_broker_id:
                follower = self.followers.get(replica)
                candidates.append(follower.log_end_offset if follower else 0)
        new_hw = min(candidates)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            return True
        return False
