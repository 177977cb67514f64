"""The broker's network processes and the descriptor channel that links them to the main process.

``num_network_processes`` network processes share one listening socket (bound by the main
process, inherited by each), read request frames straight into a buffer of the broker's
shared-memory
:class:`~clients.memory.buffer_pool.BufferPool`, and pass only a small descriptor to the
main process; responses travel back the same way, and fetch record bytes go from the
segment files to the socket with ``os.sendfile``.

Descriptor channel: one ``AF_UNIX``/``SOCK_SEQPACKET`` socketpair per network process
(packet boundaries kept by the kernel, in order, reliable; EOF when the peer process
dies).  A packet (at most ``MAX_MESSAGE_BYTES`` bytes) holds one message - a msgpack
array - or a batch of up to ``MAX_BATCH_MESSAGES`` messages, processed in order
(messages posted in one event-loop iteration share one syscall).  The payloads (request
frames, responses) live in pool buffers; a ``handle`` is ``[slot, size, generation]``.
The message table is in :mod:`broker.network.channel.codec`.

Buffer ownership: a request buffer is allocated by the network process and *claimed* by
the main process when the REQUEST is received, so a network process that dies later
cannot take it with it; the main process frees it.  A response buffer is allocated by
the main process and freed by the network process once written (or at once when its
connection is gone); the main process remembers the last response handle of every
connection so the supervisor can free those a dead network process never wrote.

Modules, one concept each:

- :mod:`~broker.network.channel` - the descriptor channel: its codec, ``ChannelEndpoint``
  (one side of the socketpair with a bounded send queue), the main process's side
  (``MainChannelEndpoint``, which also tracks buffer ownership per connection) and the
  network process's side (``MainProcessChannel``: requests handed over and counted,
  answers taken back);
- :mod:`~broker.network.supervisor` - starts, watches, restarts and stops the processes
  (main-process side);
- :mod:`~broker.network.entry` (run by ``python -m broker.network``) - a network
  process's arguments, listener and READY handshake;
- :mod:`~broker.network.process` - ``NetworkProcess``, the epoll loop: readiness,
  backpressure, deadlines, closing; it owns an :mod:`~broker.network.acceptor` (the
  listeners, connection caps), a :mod:`~broker.network.request_reader` (length field,
  pool buffer, frame), a :mod:`~broker.network.response_writer` (prefix bytes,
  ``sendfile`` regions), its :mod:`~broker.network.waiters` (connections parked for
  queue room or memory), its :mod:`~broker.network.deadlines` (read timeout, idle
  connections) and the channel's process side;
- :mod:`~broker.network.regions` - the regions' wire form and ``FileCache``;
- :mod:`~broker.network.connection` - per-connection state;
- :mod:`~broker.network.connection_shares` - what the network processes share:
  open-connection counts and the budget of partial request frames.

Imports: ``clients.memory`` and ``clients.protocol`` (and ``broker.config`` for the
supervisor, :mod:`broker.metrics.request_times` for the table of request times every
network process records in); nothing else of the broker - handlers, the core and
storage are the main process's business.  Costs: encode/decode of one message is one
msgpack call (~1 us); one ``send``/``recv`` syscall per packet.  Thread-safety: an
endpoint or a network process belongs to one thread (its event loop).  No public names
are exported here: import from the defining module.
"""
