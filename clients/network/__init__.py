"""The clients' network layer: connections to brokers and the cluster metadata cache.

What lives here: ``connection`` (one TCP connection to a broker, the socket adapter of
:class:`clients.protocol.request_channel.RequestChannel`), ``poller`` (waiting on
several connections at once), ``node_connections`` (blocking requests by node id, a
connection per node), ``sasl`` and ``tls`` (login and TLS settings) and
``cluster_metadata`` (brokers, topics, partition leaders, refresh pacing).  Used by the
producer, the consumer, the admin client and the local cluster launcher
(``broker.cluster``).

May import ``clients.protocol`` and ``clients.types`` only.  Nothing is exported here:
import from the defining module.
"""
