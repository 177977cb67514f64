"""Consumer groups on the broker: the classic group coordinator and ``__consumer_offsets``.

What lives here, from the bottom up:

- ``state``: the group state machine as a transition table (pure);
- ``metadata``: record formats of the offsets topic (byte tables, pure);
- ``txn_offsets``: :class:`PendingTxnOffsets`, a group's transactional offsets not
  committed or aborted yet (pure);
- ``members``: :class:`Group` and :class:`GroupMember`, the protocol vote;
- ``protocol``: coordinator config, group placement (Kafka's hash), write-error mapping,
  the member check, error answers, the :class:`OffsetsLog` interface;
- ``join``, ``sessions``: the join phase and member session timeouts as purgatory
  operations (they call back through callables, never import the coordinator);
- ``ownership``: which offsets partitions are owned or loading, and loading them;
- ``metadata_manager``: :class:`GroupMetadataManager`, the group cache of the owned
  partitions, loading and unloading them, and every write to the offsets topic;
- ``footprint``: the memory bounds of a member, a group and the coordinator;
- ``rebalance``: :class:`Rebalancer`, JoinGroup and the join phase;
- ``membership``: :class:`GroupMembership`, SyncGroup, Heartbeat, LeaveGroup and
  session expiry;
- ``offsets``: :class:`GroupOffsets`, OffsetCommit, TxnOffsetCommit and OffsetFetch;
- ``coordinator``: :class:`GroupCoordinator`, sans-IO, the entry point: it builds the
  rooms above, hands them the requests, answers ListGroups, DescribeGroups and
  DeleteGroups, and loads and unloads partitions;
- ``offsets_topic``: :class:`OffsetsTopic`, the coordinator's glue to the broker core
  (topic creation, FindCoordinator, leadership and loading, writes, the transaction
  marker hook ``on_txn_marker``).

May import: ``timer``, ``clients.protocol`` and ``clients.records``, ``replication`` and
``storage`` (the offsets partitions), ``broker.config``, ``broker.delayed``,
``broker.topic_registry``, ``broker.metadata.msgpack_form`` (the stored records'
codec), ``broker.requests.respond`` (the answer callback) and ``broker.async_client``'s
``ControllerChannel`` Protocol, and :mod:`broker.coordination` (hosting the offsets
topic, shared with the transaction coordinator).  Must not import ``broker.core`` (the
core creates the :class:`OffsetsTopic` and is reached through
:class:`~broker.coordination.internal_topic.InternalTopicHost`), the handlers, the
server or the network processes.  Nothing is exported here: import from the defining
module.
"""
