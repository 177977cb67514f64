"""The controller: the process that owns the cluster metadata (``python -m broker.controller``).

- :mod:`~broker.controller.state` - ``ControllerState``, the sans-IO core: registration,
  heartbeats and fencing, elections, ISR changes, producer id blocks; it owns a
  :mod:`~broker.controller.topics` ``ControllerTopics`` (CreateTopics validation and
  replica assignment, DeleteTopics).  Every mutation returns ``(result, records)``;
- :mod:`~broker.controller.results` - the requests and results of those operations;
- :mod:`~broker.controller.log` - ``ControllerLog``, the fsync'd metadata log and
  snapshots on disk;
- :mod:`~broker.controller.server` - the asyncio process around the two (wire, Fetch of
  the metadata log, timers);
- :mod:`~broker.controller.config` - ``ControllerConfig``.

Imports: :mod:`broker.metadata` (records and image), :mod:`broker.config` (the
properties syntax), ``storage`` (the metadata log is a ``storage`` Log), ``timer``
(clocks) and ``clients.protocol`` / ``clients.records``; never the broker's core,
handlers or network processes (the controller is a process of its own).  Exports
nothing: import from the defining module.
"""
