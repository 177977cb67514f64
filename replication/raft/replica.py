"""KRaftReplica: one voter of a KRaft quorum as a pure state machine (sans-IO).

Fed events, it returns the messages to send (:class:`replication.raft.messages.Send`):

* :meth:`KRaftReplica.handle` - a message arrived from another voter;
* :meth:`KRaftReplica.poll` - time passed (the injected :class:`timer.clock.Clock`):
  election / fetch timeouts, check quorum, re-sends, the leader's flush;
* :meth:`KRaftReplica.append` - the application appends entries (leader only);
* :meth:`KRaftReplica.resign` - graceful shutdown of a leader (EndQuorumEpoch).

Roles follow :data:`replication.raft.quorum_state.TRANSITIONS`; votes follow
:mod:`replication.raft.election`; the leader's bookkeeping is
:class:`replication.raft.leader_state.LeaderState`.  Election timeouts are
``election_timeout_ms + rng.randrange(election_timeout_ms)`` from the injected
``random.Random``, plus ``rng.randrange(election_backoff_max_ms)`` when a (pre-)election
starts; a Prospective that lost a live leader returns to it when its pre-vote times out
(KIP-996) and a follower told NOT_LEADER_OR_FOLLOWER by its leader (restarted, Resigned)
stops vouching for it.

Contract:

* **Persist before answering**: every change of ``(epoch, voted_for, leader_id)`` goes
  through :meth:`QuorumStateStore.write` (durable on return) before any message that
  depends on it is built.
* **Flush before reporting**: the log is flushed before its end offset is reported (a
  Fetch, the leader's own count toward the high watermark); the application's appends
  are flushed by the next :meth:`poll`.
* **Only committed entries are exposed**: ``high_watermark`` counts entries committed by a
  majority with an entry of the leader's epoch; it never moves back in one incarnation (it
  is not persisted: after a restart it starts at 0 and is relearned from the leader).
* A restarted leader comes back Resigned; a new leader first appends a LeaderChange entry
  (payload :data:`LEADER_CHANGE`) of its epoch.
* **Observer** (``observer=True``: a voter whose directory is new, its disk lost; the
  caller decides, :mod:`broker.controller.quorum.voter_directory`): it grants no vote
  or pre-vote and never stands (its pre-votes only find the leader); its Fetch says so
  and the leader neither counts it toward the high watermark or check quorum nor
  remembers what it acknowledged before.  At the leader's log end with nothing
  uncommitted, the leader appends a LeaderChange entry; the observer turns voter
  (:attr:`observer` False, the caller persists it) once the high watermark it learns is
  past the offset where it reached the log end: an entry committed by a majority without
  it after it caught up, so its log holds every committed entry.  Not covered: a vote the
  lost disk had cast in an epoch above the one it rejoins in is forgotten (docs/quorum.md).

A controller process with several voters runs it over its network driver
(:mod:`broker.controller.quorum.driver`) and its log on files
(:mod:`broker.controller.quorum.file_raft_log`), through
:mod:`broker.controller.quorum.metadata_quorum` (docs/quorum.md).  Voter-set changes are
not implemented.

Snapshots (KIP-630; the application writes them and raises the log start, the replica
serves and installs them through its :class:`~replication.raft.snapshot_store.SnapshotStore`):

* A leader answers a Fetch its log can no longer validate (:func:`~replication.raft.
  snapshot_fetch.needs_snapshot`: below its log start, or a last epoch older than the
  snapshot its log starts at) with its newest snapshot's id instead of entries; it
  serves FetchSnapshot in chunks of at most ``max_fetch_snapshot_bytes``
  (SNAPSHOT_NOT_FOUND for a snapshot it no longer holds, POSITION_OUT_OF_RANGE past its
  size); both count as the follower's Fetch for check quorum.
* A follower's fetching (Fetch, FetchSnapshot, installing a snapshot and restarting its
  log after it) is :class:`~replication.raft.follower_fetch.FollowerFetch`.
* The high watermark starts at the log start (entries below it are committed).

Costs: each event is O(voters + entries it moves); a Fetch answer copies at most
``max_fetch_entries`` entries.  Not thread-safe: one driver owns it (an event loop, or the
simulation).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from clients.protocol.errors import ErrorCode
from replication.raft.config import RaftConfig
from replication.raft.election import VoteTally, grant_pre_vote, grant_vote, log_up_to_date
from replication.raft.follower_fetch import FetchAnswer, FollowerFetch, is_resigned_answer
from replication.raft.leader_state import LeaderState, diverging_epoch
from replication.raft.messages import (
    Entry,
    QuorumBeginEpochRequest,
    QuorumBeginEpochResponse,
    QuorumEndEpochRequest,
    QuorumFetchRequest,
    QuorumFetchResponse,
    QuorumFetchSnapshotRequest,
    QuorumFetchSnapshotResponse,
    QuorumVoteRequest,
    QuorumVoteResponse,
    RaftMessage,
    Send,
)
from replication.raft.quorum_state import (
    ElectionState,
    QuorumEvent,
    QuorumRole,
    QuorumStateStore,
    next_role,
)
from replication.raft.raft_log import RaftLog
from replication.raft.rejoin import RejoinMark
from replication.raft.snapshot_fetch import (
    needs_snapshot,
    serve_snapshot_chunk,
    snapshot_reaching,
)
from replication.raft.snapshot_store import SnapshotStore
from timer.clock import Clock

__all__ = ["LEADER_CHANGE", "KRaftReplica"]

LEADER_CHANGE = b"LeaderChange"
_R = QuorumRole
_E = QuorumEvent


class KRaftReplica:
    def __init__(self, node_id: int, voters: Sequence[int], log: RaftLog,
                 store: QuorumStateStore, clock: Clock, rng: random.Random,
                 config: RaftConfig | None = None,
                 snapshots: SnapshotStore | None = None, observer: bool = False) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not one of the voters {list(voters)}")
        self.node_id = node_id
        self.voters = tuple(sorted(set(voters)))
        self.log = log
        self.config = config or RaftConfig()
        self._store = store
        self._clock = clock
        self._rng = rng
        self._snapshots = snapshots
        self._state = store.read() or ElectionState(0)
        self.high_watermark = log.start_offset  # below it: committed (a snapshot)
        self._leader: LeaderState | None = None
        self._tally: VoteTally | None = None
        self._deadline_ms = 0  # election / fetch timeout of the current role
        self._retry_ms = 0  # next re-send (votes, BeginQuorumEpoch)
        self._fetcher = FollowerFetch(node_id, log, self.config, snapshots)
        self._leader_resigned = False  # our leader sent EndQuorumEpoch
        self._fetched_from_leader = False  # as its follower (pre-votes refused only then)
        self._begin_acked: set[int] = set()
        self._retained_leader: int | None = None  # a prospective's last live leader
        self._announce_resigned = self._state.leader_id == node_id
        self.observer = observer  # a voter whose directory is new: see "Observer" above
        self._rejoin = RejoinMark()
        if self._state.leader_id == node_id:
            self.role = _R.RESIGNED  # Kafka: a restarted leader does not lead again
        elif self._state.leader_id is not None:
            self.role = _R.FOLLOWER
        else:
            self.role = _R.UNATTACHED
        self._reset_election_timer()
        if self.role is _R.FOLLOWER:
            self._deadline_ms = self._now() + self.config.fetch_timeout_ms

    # -- read-only view --------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int | None:
        return self._state.leader_id

    @property
    def voted_for(self) -> int | None:
        return self._state.voted_for

    def voter_progress(self) -> dict[int, tuple[int, int]]:
        """As leader: each voter's ``(end offset, last fetch ms)`` (the replica's clock;
        DescribeQuorum); as anything else: ``{}`` (only the leader knows)."""
        if self.role is not _R.LEADER or self._leader is None:
            return {}
        return {v: (self._leader.end_offset_of(v), self._leader.last_fetch_ms_of(v))
                for v in self.voters}

    def next_deadline_ms(self) -> int:
        """When :meth:`poll` has something to do next, at the latest."""
        if self.role is _R.LEADER:
            if self.log.flushed_end_offset < self.log.end_offset:
                return self._now()  # appends to flush
            unacked = len(self._begin_acked) < len(self.voters) - 1
            return min(self._deadline_ms, self._retry_ms) if unacked else self._deadline_ms
        times = [self._deadline_ms]
        if self.role in (_R.PROSPECTIVE, _R.CANDIDATE):
            times.append(self._retry_ms)
        if self.role is _R.FOLLOWER:
            times.append(self._fetcher.deadline_ms())
        return min(times)

    # -- events ----------------------------------------------------------------------

    def append(self, payloads: Sequence[bytes]) -> int | None:
        """Append as leader (flushed by the next poll); the last offset, or None."""
        if self.role is not _R.LEADER or not payloads:
            return None
        self.log.append(Entry(self.epoch, p) for p in payloads)
        return self.log.end_offset - 1

    def resign(self) -> list[Send]:
        """Graceful shutdown of a leader: hand over at once (EndQuorumEpoch)."""
        if self.role is not _R.LEADER or self._leader is None:
            return []
        successors = self._leader.successors()
        self._become_resigned()
        return [Send(v, QuorumEndEpochRequest(self.epoch, self.node_id, successors))
                for v in successors]

    def poll(self) -> list[Send]:
        now = self._now()
        if self.role is _R.LEADER:
            return self._poll_leader(now)
        if now >= self._deadline_ms:
            if self.role is _R.PROSPECTIVE and self._retained_leader is not None:
                return self._become_follower(self.epoch, self._retained_leader)  # KIP-996
            return self._become_prospective()
        if self._announce_resigned:
            self._announce_resigned = False
            req = QuorumEndEpochRequest(self.epoch, self.node_id, ())
            return [Send(v, req) for v in self.voters if v != self.node_id]
        out: list[Send] = []
        if self.role in (_R.PROSPECTIVE, _R.CANDIDATE) and now >= self._retry_ms:
            out += self._request_votes()
        if self.role is _R.FOLLOWER and self._fetcher.due(now):
            out += self._fetch()
        return out

    def handle(self, source: int, message: RaftMessage) -> list[Send]:
        if source not in self.voters or source == self.node_id:
            return []  # only voters take part (observers are not implemented)
        match message:
            case QuorumVoteRequest():
                return self._on_vote_request(source, message)
            case QuorumVoteResponse():
                return self._on_vote_response(source, message)
            case QuorumBeginEpochRequest():
                return self._on_begin_epoch(source, message)
            case QuorumBeginEpochResponse():
                if message.epoch == self.epoch and self.role is _R.LEADER:
                    self._begin_acked.add(source)
                return self._observe_epoch(message.epoch, None)
            case QuorumEndEpochRequest():
                return self._on_end_epoch(message)
            case QuorumFetchRequest():
                return self._on_fetch_request(source, message)
            case QuorumFetchSnapshotRequest():
                return self._on_fetch_snapshot_request(source, message)
            case QuorumFetchResponse() | QuorumFetchSnapshotResponse():
                return self._on_fetch_answer(source, message)

    # -- election --------------------------------------------------------------------

    def _on_vote_request(self, source: int, req: QuorumVoteRequest) -> list[Send]:
        up_to_date = log_up_to_date(req.last_epoch, req.end_offset, self.log.last_epoch,
                                    self.log.end_offset)
        if req.pre_vote:
            granted = not self.observer and grant_pre_vote(
                req.epoch, self.epoch, up_to_date, self._heard_from_leader())
            answer = QuorumVoteResponse(self.epoch, granted, self._live_leader(), True)
            return [Send(source, answer)]
        out: list[Send] = []
        if req.epoch > self.epoch:
            out += self._become_unattached(req.epoch)
        granted = (not self.observer and req.epoch == self.epoch
                   and grant_vote(self.role, self.voted_for, req.candidate_id, up_to_date))
        if granted:
            self.role = next_role(self.role, _E.VOTE_CAST)
            self._persist(ElectionState(self.epoch, req.candidate_id, None))
            self._reset_election_timer()
        answer = QuorumVoteResponse(self.epoch, granted, self._live_leader(), False)
        return [*out, Send(source, answer)]

    def _live_leader(self) -> int | None:
        """The leader we follow or are (not one remembered after losing contact)."""
        if self.role is _R.LEADER or (self.role is _R.FOLLOWER and not self._leader_resigned):
            return self.leader_id
        return None

    def _on_vote_response(self, source: int, resp: QuorumVoteResponse) -> list[Send]:
        if resp.epoch > self.epoch:
            return self._observe_epoch(resp.epoch, resp.leader_id)
        if (resp.epoch == self.epoch and not resp.granted and resp.leader_id is not None
                and resp.leader_id not in (self.node_id, self._retained_leader)
                and self.role is _R.PROSPECTIVE):
            return self._become_follower(resp.epoch, resp.leader_id)  # KIP-996: it lives
        out = self._observe_epoch(resp.epoch, resp.leader_id)
        if self.role is _R.FOLLOWER:
            return out  # it named a leader of our epoch we did not know: no election now
        if self._tally is None:
            return []
        if resp.pre_vote and self.role is _R.PROSPECTIVE:
            self._tally.record(source, resp.granted)
            won = self._tally.won and not self.observer  # an observer only seeks the leader
            return self._become_candidate() if won else []
        if not resp.pre_vote and self.role is _R.CANDIDATE and resp.epoch == self.epoch:
            self._tally.record(source, resp.granted)
            return self._become_leader() if self._tally.won else []
        return []

    def _heard_from_leader(self) -> bool:  # Kafka: a follower that never fetched grants
        return self.role is _R.LEADER or (self.role is _R.FOLLOWER and self._fetched_from_leader
                                          and not self._leader_resigned)

    def _become_prospective(self) -> list[Send]:
        following = self.role is _R.FOLLOWER and not self._leader_resigned
        self._retained_leader = self.leader_id if following else None
        self.role = next_role(self.role, _E.ELECTION_TIMEOUT)
        self._leader = None
        self._fetcher.reset()
        self._tally = VoteTally(self.voters, self.node_id)
        self._reset_election_timer(backoff=True)
        if self._tally.won and not self.observer:
            return self._become_candidate()
        return self._request_votes()

    def _become_candidate(self) -> list[Send]:
        self.role = next_role(self.role, _E.PRE_VOTE_MAJORITY)
        self._persist(ElectionState(self.epoch + 1, self.node_id, None))
        self._tally = VoteTally(self.voters, self.node_id)
        self._reset_election_timer(backoff=True)
        if self._tally.won:
            return self._become_leader()
        return self._request_votes()

    def _request_votes(self) -> list[Send]:
        assert self._tally is not None
        self._retry_ms = self._now() + self.config.request_timeout_ms
        pre_vote = self.role is _R.PROSPECTIVE
        req = QuorumVoteRequest(self.epoch + 1 if pre_vote else self.epoch, self.node_id,
                          self.log.last_epoch, self.log.end_offset, pre_vote)
        return [Send(v, req) for v in sorted(self._tally.unanswered())]

    def _become_leader(self) -> list[Send]:
        self.role = next_role(self.role, _E.VOTE_MAJORITY)
        self._persist(ElectionState(self.epoch, self.node_id, self.node_id))
        self._tally = None
        now = self._now()
        start = self.log.end_offset
        self.log.append([Entry(self.epoch, LEADER_CHANGE)])
        self.log.flush()
        self._leader = LeaderState(self.node_id, self.voters, self.epoch, start,
                                   self.high_watermark, now)
        self._leader.update_local(self.log.flushed_end_offset, now)
        self.high_watermark = self._leader.high_watermark
        self._deadline_ms = now + self.config.fetch_timeout_ms + 1
        self._begin_acked = set()
        return self._begin_epoch(now)

    def _begin_epoch(self, now: int) -> list[Send]:
        self._retry_ms = now + self.config.request_timeout_ms
        req = QuorumBeginEpochRequest(self.epoch, self.node_id)
        return [Send(v, req) for v in self.voters
                if v != self.node_id and v not in self._begin_acked]

    def _become_resigned(self) -> None:
        self.role = next_role(self.role, _E.RESIGN)
        self._leader = None
        self._reset_election_timer()

    def _become_unattached(self, epoch: int) -> list[Send]:
        self.role = next_role(self.role, _E.NEW_EPOCH)
        self._persist(ElectionState(epoch, None, None))
        self._leader = self._tally = None
        self._fetcher.reset()
        self._reset_election_timer()
        return []

    def _become_follower(self, epoch: int, leader_id: int) -> list[Send]:
        self.role = next_role(self.role, _E.LEADER_KNOWN)
        voted = self.voted_for if epoch == self.epoch else None
        self._persist(ElectionState(epoch, voted, leader_id))
        self._leader = self._tally = None
        self._fetcher.reset()
        self._leader_resigned = self._fetched_from_leader = False
        self._retained_leader = None
        self._deadline_ms = self._now() + self.config.fetch_timeout_ms
        return self._fetch()

    def _observe_epoch(self, epoch: int, leader_id: int | None) -> list[Send]:
        """Adopt a higher epoch (and its leader), or the leader of our epoch."""
        known = leader_id is not None and leader_id != self.node_id
        if epoch > self.epoch:
            if known:
                assert leader_id is not None
                return self._become_follower(epoch, leader_id)
            return self._become_unattached(epoch)
        if (epoch == self.epoch and known and self.leader_id is None
                and self.role not in (_R.LEADER, _R.RESIGNED)):
            assert leader_id is not None
            return self._become_follower(epoch, leader_id)
        return []

    def _on_begin_epoch(self, source: int, req: QuorumBeginEpochRequest) -> list[Send]:
        out = self._observe_epoch(req.epoch, req.leader_id)
        if req.epoch == self.epoch and self.leader_id == req.leader_id:
            return [*out, Send(source, QuorumBeginEpochResponse(self.epoch))]
        return [*out, Send(source, QuorumBeginEpochResponse(
            self.epoch, ErrorCode.FENCED_LEADER_EPOCH))]

    def _on_end_epoch(self, req: QuorumEndEpochRequest) -> list[Send]:
        out = self._observe_epoch(req.epoch, None)
        if (self.role is _R.FOLLOWER and req.epoch == self.epoch
                and req.leader_id == self.leader_id):
            self._leader_resigned = True
            successors = req.preferred_successors
            position = successors.index(self.node_id) if self.node_id in successors else None
            if position is None:
                self._reset_election_timer()
            else:
                self._deadline_ms = self._now() + min(
                    self.config.election_backoff_max_ms,
                    self.config.retry_backoff_ms * ((1 << position) - 1))
        return out

    def _reset_election_timer(self, backoff: bool = False) -> None:
        timeout = self.config.election_timeout_ms
        extra = self._rng.randrange(self.config.election_backoff_max_ms) if backoff else 0
        self._deadline_ms = self._now() + timeout + self._rng.randrange(timeout) + extra
        self._retry_ms = self._now()

    # -- replication -----------------------------------------------------------------

    def _poll_leader(self, now: int) -> list[Send]:
        assert self._leader is not None
        if self.log.flushed_end_offset < self.log.end_offset:
            self.log.flush()
        self._advance_leader(self._leader.update_local(self.log.flushed_end_offset, now))
        self._deadline_ms = self._leader.quorum_deadline_ms(now, self.config.fetch_timeout_ms)
        if now >= self._deadline_ms:
            return self.resign()  # check quorum: no Fetch from a majority in the timeout
        return self._begin_epoch(now) if now >= self._retry_ms else []

    def _advance_leader(self, moved: bool) -> None:
        if moved and self._leader is not None:
            self.high_watermark = self._leader.high_watermark

    def _on_fetch_request(self, source: int, req: QuorumFetchRequest) -> list[Send]:
        if req.epoch < self.epoch or (req.epoch == self.epoch and self.role is not _R.LEADER):
            error = (ErrorCode.FENCED_LEADER_EPOCH if req.epoch < self.epoch
                     else ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return [Send(source, QuorumFetchResponse(self.epoch, self.leader_id, error=error))]
        if req.fetch_offset < 0:
            return [Send(source, QuorumFetchResponse(self.epoch, self.leader_id,
                                                     error=ErrorCode.INVALID_REQUEST))]
        if req.epoch > self.epoch or self._leader is None:
            return [Send(source, QuorumFetchResponse(self.epoch, self.leader_id,
                                               error=ErrorCode.UNKNOWN_LEADER_EPOCH))]
        self._begin_acked.add(source)
        diverging = diverging_epoch(self.log.epoch_cache, self.log.end_offset,
                                    req.fetch_offset, req.last_fetched_epoch)
        if needs_snapshot(self.log.start_snapshot, req.fetch_offset, req.last_fetched_epoch):
            self._leader.on_fetch(source, 0, self._now(), req.observer)  # offset unknown
            return [Send(source, QuorumFetchResponse(
                self.epoch, self.node_id, req.fetch_offset, high_watermark=self.high_watermark,
                snapshot_id=snapshot_reaching(self._snapshots, self.log.start_offset)))]
        if diverging is not None:
            self._leader.on_fetch(source, 0, self._now(), req.observer)  # offset unknown
            return [Send(source, QuorumFetchResponse(self.epoch, self.node_id, req.fetch_offset,
                                               high_watermark=self.high_watermark,
                                               diverging=diverging))]
        self._advance_leader(self._leader.on_fetch(source, req.fetch_offset, self._now(),
                                                   req.observer))
        entries = tuple(self.log.entries_from(req.fetch_offset, self.config.max_fetch_entries))
        if req.observer and req.fetch_offset == self.log.end_offset == self.high_watermark:
            self.log.append([Entry(self.epoch, LEADER_CHANGE)])  # its commit lets it vote
        return [Send(source, QuorumFetchResponse(self.epoch, self.node_id, req.fetch_offset,
                                                 entries, self.high_watermark))]

    def _on_fetch_snapshot_request(self, source: int, req: QuorumFetchSnapshotRequest
                                   ) -> list[Send]:
        error, size, data = ErrorCode.UNKNOWN_LEADER_EPOCH, 0, b""
        if req.epoch < self.epoch or (req.epoch == self.epoch and self.role is not _R.LEADER):
            error = (ErrorCode.FENCED_LEADER_EPOCH if req.epoch < self.epoch
                     else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        elif req.epoch == self.epoch and self._leader is not None:
            self._leader.on_fetch_snapshot(source, self._now())  # alive (check quorum)
            error, size, data = serve_snapshot_chunk(self._snapshots, req.snapshot_id,
                                                     req.position,
                                                     self.config.max_fetch_snapshot_bytes)
        return [Send(source, QuorumFetchSnapshotResponse(
            self.epoch, self.leader_id, req.snapshot_id, req.position, size, data, error))]

    def _fetch(self) -> list[Send]:
        if self.role is not _R.FOLLOWER or self.leader_id is None:
            return []
        return [Send(self.leader_id, self._fetcher.request(self.epoch, self._now(), self.observer))]

    def _on_fetch_answer(self, source: int, resp: FetchAnswer) -> list[Send]:
        out = self._observe_epoch(resp.epoch, resp.leader_id)
        if out or self.role is not _R.FOLLOWER or source != self.leader_id:
            return out
        if is_resigned_answer(resp, self.epoch):
            self._leader_resigned = True  # our leader restarted and resigned
        if resp.epoch != self.epoch or not self._fetcher.answers_pending(resp):
            return []  # an error, or a late or duplicated answer: the timer re-sends
        self._fetched_from_leader = True
        now = self._now()
        if not self._leader_resigned:
            self._deadline_ms = now + self.config.fetch_timeout_ms
        got = self._fetcher.on_answer(resp, self.high_watermark, now)
        self.high_watermark = got.high_watermark
        if self.observer and got.entries is not None and self._rejoin.caught_up(
                self.epoch, got.entries > 0, self.log.end_offset, self.high_watermark):
            self.observer = False
        return self._fetch() if got.again else []

    # -- persistence -----------------------------------------------------------------

    def _persist(self, state: ElectionState) -> None:
        if state != self._state:
            self._store.write(state)  # durable on return: before any answer built on it
            self._state = state

    def _now(self) -> int:
        return self._clock.now_ms()
