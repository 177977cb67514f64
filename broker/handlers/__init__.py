"""The broker's API handlers: decoded request body in, response body out through
``respond`` (see :mod:`broker.handlers.common` for the handler contract).

One module per concept, each with its table of handlers: ``topics`` (Metadata,
CreateTopics, DeleteTopics, CreatePartitions, DescribeCluster), ``configs``
(DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), ``produce`` (Produce),
``fetch`` (Fetch, ListOffsets, OffsetsForLeaderEpoch, DescribeLogDirs), ``records``
(DeleteRecords), ``groups`` (the group coordinator APIs, thin over :mod:`broker.group`),
``producer_ids`` (InitProducerId), ``partition_txns`` (WriteTxnMarkers, DescribeProducers:
the partition side of transactions); ``common`` holds the shared types (the handler
signature, :class:`~broker.handlers.common.RequestContext` with the request's version)
and helpers and ``dispatch`` merges the tables into :data:`HANDLERS` and answers
ApiVersions.

May import: Protocols of the broker (``broker_view.HandlerCore``: every handler works on
it, never on ``broker.core``), ``broker.replica``'s errors and constants,
``broker.config``, ``broker.delayed``, ``broker.group``, ``broker.producer_ids``,
``replication``, ``storage`` and ``clients.protocol``. Imported by the server
(``dispatch.HANDLERS``, ``common.RegionRecords``) and tests only; must not import the
server or the network processes. Nothing is exported here: import from the defining
module.
"""
