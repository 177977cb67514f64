"""The wire protocol: what travels between a client and a broker, and what both agree on.

Modules, one concept each:

- :mod:`~clients.protocol.framing`: the byte stream split into length-prefixed frames;
- :mod:`~clients.protocol.codec`: request/response headers and bodies inside a frame;
- :mod:`~clients.protocol.schema` and :mod:`~clients.protocol.wire_types`: the schema
  language a message is declared in (typed fields with versions), compiled to checkers;
- :mod:`~clients.protocol.api_keys` (:class:`ApiKey`, :class:`Api`),
  :mod:`~clients.protocol.messages` (each API's request and response, by area) and
  :mod:`~clients.protocol.registry` (``APIS``, key -> declaration);
- :mod:`~clients.protocol.errors`: Kafka's error codes and the exceptions that carry them;
- :mod:`~clients.protocol.topics`: topic name rules and :class:`TopicPartition`.

A foundation of the code base: ``storage``, ``replication`` and ``broker`` may import it.
It imports nothing from the project outside this package.  No public re-exports here:
import each name from the module that defines it.
"""
