"""The shared-memory BufferPool: Kafka's producer BufferPool in one segment many processes map.

- :mod:`~clients.memory.buffer_pool`: :class:`BufferPool` (create/attach, allocate and
  free, cross-process handoff, reclaim of dead processes' buffers, metrics);
- :mod:`~clients.memory.slots`: the slot allocator, free list and waiter queue;
- :mod:`~clients.memory.segment`: the segment's byte layout, its lock and process
  identity;
- :mod:`~clients.memory.handles`: :class:`Buffer`, :class:`BufferHandle` and metrics
  values; :mod:`~clients.memory.errors`: the pool's exceptions.

Used by the producer's accumulator and by a broker's main and network processes.  A
foundation of the code base: ``storage``, ``replication`` and ``broker`` may import it.
Imports only :mod:`clients.protocol.errors` from outside this package.
"""
