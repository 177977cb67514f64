"""The broker: the process core at this level, one subpackage per concept below it.

At the top, the broker process itself: :mod:`broker.core` (``BrokerCore``, the sans-IO
state: logs, hosted partitions, purgatories, the standalone topic registry),
:mod:`broker.server` (the main process, an asyncio loop around the core),
:mod:`broker.__main__` (``python -m broker start``), :mod:`broker.config`
(``BrokerConfig``), and the core's helpers: :mod:`broker.delayed` (delayed produce and
fetch), :mod:`broker.replica_fetcher`, :mod:`broker.producer_ids`,
:mod:`broker.topic_registry` (topics of a broker without a controller) and
:mod:`broker.async_client` (the asyncio client to other brokers and the controller).

Subpackages: ``network/`` (network processes and the descriptor channel to the main
process), ``handlers/`` (one module per group of APIs), ``controller/`` (the controller
process), ``metadata/`` (the cluster metadata records, image and the broker's follower),
``group/`` (the group coordinator and ``__consumer_offsets``), ``cluster/`` (the local
cluster launcher and ``cluster status``), ``replica/`` (the replica manager's rooms),
``requests/`` (the main process's request path: logins, responses).

Imports: ``replication``, ``storage``, ``timer`` and the foundations of ``clients``
(``clients.protocol``, ``clients.records``, ``clients.memory``); never the client APIs
(producer, consumer, admin), except ``broker.cluster``, which may use
``clients.network`` to ask the processes it started.  Nothing below ``broker`` imports
it.  This package exports nothing: import from the defining module.
"""
