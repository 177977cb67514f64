"""KRaft's quorum protocol as a pure, sans-IO replica (issue 34, foundation only).

Kafka's Raft (KIP-595 election and Fetch-based replication, KIP-996 PreVote) for one
replicated log: :mod:`.quorum_state` (roles as a transition table, the persisted election
state and its store), :mod:`.messages` (the protocol), :mod:`.raft_log` (the log it
replicates), :mod:`.election` (vote rules), :mod:`.leader_state` (the leader's view of
the voters: HW, check quorum, fetch validation), :mod:`.config` (timeouts),
:mod:`.state_file` (the fsync'd quorum-state file), :mod:`.rejoin` (when a voter whose
disk was lost, an observer, may vote again), :mod:`.follower_fetch` (a follower's Fetch
and FetchSnapshot), :mod:`.snapshot_store` and :mod:`.snapshot_fetch` (KIP-630
snapshots: stored, served in chunks, fetched) and :mod:`.replica` (the state machine fed
events that returns messages to send).

It lives under ``replication`` because it is log replication by leader epoch: it reuses
:mod:`replication.truncation` and :class:`replication.leader_epoch_cache.LeaderEpochCache`
and, like the rest of ``replication``, imports nothing from ``broker``.

A controller started with several voters runs it
(:mod:`broker.controller.quorum.metadata_quorum`); voter-set changes are not
implemented.  It is proven by a seeded simulation
(``tests/replication/raft/``) and a real-process failover test (docs/quorum.md).
"""
