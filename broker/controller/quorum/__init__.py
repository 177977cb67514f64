"""The controller's side of the KRaft quorum (issue 34): the replica's log on the metadata
log files (:mod:`.file_raft_log`), the record-batch form of its entries
(:mod:`.entry_batches`) and the asyncio driver that runs the replica over the network.
The replica itself (pure, sans-IO) is :mod:`replication.raft`."""
