"""The descriptor channel between the broker's main process and one network process.

One ``AF_UNIX``/``SOCK_SEQPACKET`` socketpair per network process (see
:mod:`broker.network` for the packets and buffer ownership).  Modules, one side or layer
each:

- :mod:`~broker.network.channel.codec` - the messages, their codec and errors;
- :mod:`~broker.network.channel.endpoint` - ``ChannelEndpoint``, one side of the
  socketpair with a bounded send queue;
- :mod:`~broker.network.channel.main_side` - ``MainChannelEndpoint``, the main
  process's side, which also tracks request/response buffer ownership per connection;
- :mod:`~broker.network.channel.process_side` - ``MainProcessChannel``, the network
  process's side (Kafka's ``RequestChannel`` seen from a processor): requests handed
  over, the count of those not answered yet, answers taken back, CLOSED reported.

Imports ``clients.memory`` and ``clients.protocol`` only (and
:mod:`broker.network.connection` for the process side).  No public names are exported
here: import from the defining module.
"""
