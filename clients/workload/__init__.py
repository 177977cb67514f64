"""The verification workload: ledgered producers under a fault schedule (no Spark needed).

``run`` (``minikafka workload``: idempotent producer threads, the ledger, faults at
times), ``transactional`` (multi-partition transactions, our client or confluent-kafka's
through ``confluent_txn``), ``ledger`` (the append-only record of what was sent and
acknowledged, read back by :mod:`clients.spark.verify`), ``faults`` (kill / pause /
restart of a local cluster's processes through ``python -m broker.cluster``).

May import the producer, consumer and admin client and the rooms below them; never
``broker``, ``replication`` or ``storage``, nor ``clients.cli`` or ``clients.spark``.
Nothing is exported here: import from the module.
"""
