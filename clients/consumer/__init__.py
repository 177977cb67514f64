"""The consumer: :class:`~clients.consumer.consumer.Consumer` and its group membership.

What lives here: the consumer facade (``consumer``: assign, seek, poll), its
subscription state (``subscription_state``: per-partition position state machine and
pause flag), its fetcher (``fetcher``: Fetch requests and decoding; ``aborted_transactions``: which
fetched batches it hands out under each isolation level) and its offset
look-ups (``offset_fetcher``: ListOffsets); for groups, the member side of the classic
group protocol (``coordinator``), the leader's assignment (``group_leader``), its link
to the group coordinator and the group settings (``coordinator_channel``), the heartbeat
thread (``heartbeat``), offset commits (``offset_committer``; ``auto_commit`` for both
protocols; ``stale_epoch``: KIP-848 commits answered STALE_MEMBER_EPOCH), the KIP-848
member (``membership``), the group API bodies
whose shape depends on the version (``group_requests``), the subscription/assignment
bytes (``group_protocol``, Kafka's ConsumerProtocol) and the partition assignors
(``assignors``).

May import ``clients.protocol``, ``clients.records``, ``clients.network`` and
``clients.types``; never ``broker``, ``replication`` or ``storage``, nor the producer,
admin, spark or cli rooms.

Public surface: ``Consumer`` (``from clients.consumer import Consumer``).  Project code
imports it from its defining module, :mod:`clients.consumer.consumer`.
"""

from clients.consumer.consumer import Consumer

__all__ = ["Consumer"]
