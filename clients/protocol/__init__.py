"""The wire protocol: what travels between a client and a broker, and what both agree on.

Modules, one concept each:

- :mod:`~clients.protocol.framing`: the byte stream split into length-prefixed frames;
- :mod:`~clients.protocol.codec`: Kafka's request/response headers and bodies in a frame;
- :mod:`~clients.protocol.request_channel`: one client connection's protocol state, sans
  I/O (correlation ids, in-flight requests and deadlines, ApiVersions negotiation), which
  the client's socket connection drives;
- :mod:`~clients.protocol.schema`: the language a message is declared in (typed fields
  with versions, nullability and tags); :mod:`~clients.protocol.compiler` turns a
  declaration into straight-line encoders and decoders; :mod:`~clients.protocol.reference`
  interprets it slowly, for precise error paths and as the compiler's test oracle;
- :mod:`~clients.protocol.api_keys` (:class:`ApiKey`, :class:`Api`),
  :mod:`~clients.protocol.messages` (each API's request and response, by area) and
  :mod:`~clients.protocol.registry` (``APIS``, key -> declaration);
- :mod:`~clients.protocol.errors`: Kafka's error codes and the exceptions that carry them;
- :mod:`~clients.protocol.topics`: topic name rules and :class:`TopicPartition`.

A foundation of the code base: ``storage``, ``replication`` and ``broker`` may import it.
It imports nothing from the project outside this package.  No public re-exports here:
import each name from the module that defines it.
"""
