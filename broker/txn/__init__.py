"""Transactions on the broker: the transaction coordinator and ``__transaction_state``.

What lives here, from the bottom up:

- ``state``: Kafka's transaction states, their valid previous states (data) and the pure
  transitions of one transactional id's metadata;
- ``records``: record formats of ``__transaction_state`` (key, value);
- ``coordinator``: :class:`TransactionCoordinator`, sans-IO: the metadata cache of the
  owned state partitions, every request (InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, Describe/ListTransactions, verify-only), writes before
  answers, loading and finishing what was in progress, timeouts and expiry;
- ``parking``: AddPartitionsToTxn/AddOffsetsToTxn parked while the producer's previous
  transaction completes (a purgatory), folded into its Complete* write;
- ``listing``: Describe/ListTransactions answers from the metadata (pure);
- ``markers``: the marker queue (pure) and its asyncio adapter that sends WriteTxnMarkers
  to the partition leaders;
- ``state_topic``: :class:`TransactionStateTopic`, the coordinator's glue to the broker
  core (FindCoordinator key_type 1, loading the records, writes, timers, KIP-890
  verification; the topic's hosting is :mod:`broker.coordination.internal_topic`'s).

May import what :mod:`broker.group` may import, plus :mod:`broker.group.protocol`
(Kafka's placement hash) and :mod:`broker.auth` (the broker login of the marker
connections).  Must not import ``broker.core``, the handlers, the server or the network
processes.  Nothing is exported here: import from the defining module.
"""
