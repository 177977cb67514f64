"""The controller's side of the KRaft quorum (issue 34): the replica's log on the metadata
log files (:mod:`.file_raft_log`), the record-batch form of its entries
(:mod:`.entry_batches`), its messages on Kafka's wire (:mod:`.wire`), the asyncio driver
that runs the replica over the network (:mod:`.driver`) and the voter set's text form
(:mod:`.voters`).  The replica itself (pure, sans-IO) is :mod:`replication.raft`.  The
controller process does not run the driver yet (docs/quorum.md)."""
