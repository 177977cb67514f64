"""The controller's side of the KRaft quorum (issue 34): the replica's log on the metadata
log files (:mod:`.file_raft_log`), the record-batch form of its entries
(:mod:`.entry_batches`), its messages on Kafka's wire (:mod:`.wire`), the asyncio driver
that runs the replica over the network (:mod:`.driver`), the voter set's text form
(:mod:`.voters`), a voter directory's identity (:mod:`.voter_directory`: a lost disk
comes back an observer), and the controller process's use of them: the metadata log replicated
and applied only once committed (:mod:`.metadata_quorum`).  The replica itself (pure,
sans-IO) is :mod:`replication.raft`.  docs/quorum.md says what works and what does not."""
