"""The clients' network layer: connections to brokers and the cluster metadata cache.

What lives here: ``connection`` (one TCP connection to a broker with its in-flight
requests, a poller over several, a per-node connection set) and ``cluster_metadata``
(brokers, topics, partition leaders, refresh pacing).  Used by the producer, the
consumer, the admin client and the local cluster launcher (``broker.cluster``).

May import ``clients.protocol`` and ``clients.types`` only.  Nothing is exported here:
import from the defining module.
"""
