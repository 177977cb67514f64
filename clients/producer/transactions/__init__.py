"""The transactional producer's parts (Kafka's client ``TransactionManager`` split by concept).

- :mod:`~clients.producer.transactions.state`: the states, Kafka's transition table and
  the errors a wrong call order or a failed transaction raises (pure, no I/O).
- :mod:`~clients.producer.transactions.manager`: :class:`TransactionManager`, the state
  machine of one transactional producer (partitions of the transaction, queued coordinator
  requests, what each answer means); no I/O, no clock.
- :mod:`~clients.producer.transactions.calls`: the Producer's transactional methods as
  the user's thread runs them (start the operation, wake the sender, wait up to
  ``max_block_ms``).
- :mod:`~clients.producer.transactions.coordinator_requests`: the sender-thread side that
  finds the coordinators and sends the manager's requests (FindCoordinator key type 1,
  InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn).

May import what :mod:`clients.producer` may; the producer imports it, never the reverse
(except :mod:`clients.producer.idempotence`'s ``TransactionGate`` Protocol, which the
manager implements).
"""
