"""The producer: :class:`~clients.producer.producer.Producer` and the parts it is built of.

What lives here: settings checks (``config``), partitioners (``partitioner``), producer
batches (``batch``) and their per-partition queues (``accumulator``, ordering rules in
``drain``), idempotence bookkeeping (``idempotence``), the numpy bulk path (``bulk``),
``compression_type`` (``compression``), the futures ``send`` returns (``future``),
and the sender thread (``sender``) with its two collaborators, Produce requests
(``produce_requests``) and the producer id exchange (``producer_id``); transactions are
the subpackage ``transactions`` (states, the transaction manager, its coordinator
requests, the user-thread calls).

May import ``clients.protocol``, ``clients.records``, ``clients.memory``,
``clients.network`` and ``clients.types``; never ``broker``, ``replication`` or
``storage``, nor the consumer, admin, spark or cli rooms.

Public surface: ``Producer`` (``from clients.producer import Producer``).  Project code
imports it from its defining module, :mod:`clients.producer.producer`.
"""

from clients.producer.producer import Producer

__all__ = ["Producer"]
