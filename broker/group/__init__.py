"""Consumer groups on the broker: the classic group coordinator and ``__consumer_offsets``.

What lives here, from the bottom up:

- ``state``: the group state machine as a transition table (pure);
- ``metadata``: record formats of the offsets topic (byte tables, pure);
- ``members``: :class:`Group` and :class:`GroupMember`, the protocol vote;
- ``protocol``: coordinator config, group placement (Kafka's hash), write-error mapping,
  error answers, the :class:`OffsetsLog` interface;
- ``join``, ``sessions``: the join phase and member session timeouts as purgatory
  operations (they call back through callables, never import the coordinator);
- ``ownership``: which offsets partitions are owned or loading, and loading them;
- ``coordinator``: :class:`GroupCoordinator` (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup), sans-IO, composing the three collaborators above;
- ``offsets``: OffsetCommit, OffsetFetch, ListGroups, DescribeGroups over a coordinator;
- ``offsets_topic``: :class:`OffsetsTopic`, the coordinator's glue to the broker core
  (topic creation, FindCoordinator, leadership and loading, writes).

May import: ``timer``, ``clients.protocol`` and ``clients.records``, ``replication`` and
``storage`` (the offsets partitions), ``broker.config``, ``broker.delayed`` and
``broker.topic_registry``.  Must not import ``broker.core`` (the core creates the
:class:`OffsetsTopic` and is reached through :class:`OffsetsTopicHost`), the handlers, the
server or the network processes.  Nothing is exported here: import from the defining
module.
"""
