"""What the broker's coordinators share: hosting a coordinator's internal topic.

- ``internal_topic``: :class:`InternalTopic`, one coordinator's internal, compacted
  topic on this broker (``__consumer_offsets`` for the group coordinator,
  ``__transaction_state`` for the transaction coordinator): creation on demand, which
  partition a key maps to and who leads it, which partitions this broker leads, loading
  them into the coordinator when it becomes their leader and unloading them when it
  stops, and the coordinator's writes; :class:`InternalTopicHost`, what it asks the
  broker core.
- ``placement``: Kafka's placement hash, the partition of a group id or transactional
  id (``partition_for``).

May import what :mod:`broker.group` may import, but not :mod:`broker.group` itself.
Imported by :mod:`broker.group` and :mod:`broker.txn`; must not import them,
``broker.core``, the handlers, the server or the network processes.  Nothing is
exported here: import from the defining module.
"""
