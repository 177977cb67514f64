"""KIP-848 consumer groups: the broker-driven consumer group protocol (ConsumerGroupHeartbeat).

Beside the classic protocol of :mod:`broker.group` (JoinGroup/SyncGroup), in the same
coordinator: a group id is either a classic group or a consumer group.  What lives here,
from the bottom up:

- ``assignors``: the server-side assignors ``uniform`` and ``range`` (pure functions);
- ``reconciliation``: one member's state and Kafka's CurrentAssignmentBuilder: how a
  member moves from its current assignment to its target, revoking before assigning and
  never taking a partition another member still owns (pure);
- ``group``: :class:`ConsumerGroup`: members, group epoch, target assignment and its
  epoch, subscriptions (names and regular expressions resolved here), partition owners,
  and the heartbeat as a pure transition (injected time, no I/O);
- ``coordinator``: :class:`ConsumerGroupCoordinator`, the adapter the group coordinator
  hands ConsumerGroupHeartbeat, ConsumerGroupDescribe and the member checks of
  OffsetCommit/OffsetFetch to; member session and rebalance timeouts as delayed
  operations on the broker's timer;
- ``classic_protocol``: classic members' ConsumerProtocolSubscription/Assignment bytes
  read as topic ids (pure); ``protocol_views``: a consumer group as DescribeGroups shows
  it (pure);
- ``migration``: the migration policy, and converting a classic group to a consumer
  group and back as pure decisions and functions;
- ``classic_members``: :class:`ClassicMembers`, JoinGroup/SyncGroup/Heartbeat/LeaveGroup
  of classic members served by a consumer group;
- ``conversion``: :class:`GroupConversion`, the upgrade and downgrade in the
  coordinator (timers, parked requests, records).

May import what :mod:`broker.group` may, and :mod:`broker.group`'s own modules (the
coordinator's errors, the ownership of the offsets partitions).  Nothing is exported
here: import from the defining module.
"""
