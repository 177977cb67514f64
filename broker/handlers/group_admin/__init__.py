"""Handlers of Kafka's consumer-group admin APIs that the group protocol itself does not
need, one module per API: ``offset_delete`` (OffsetDelete, what
``kafka-consumer-groups.sh --delete-offsets`` sends).  Each module has its table of
handlers, merged by :mod:`broker.handlers.dispatch`.  Same import rules as
:mod:`broker.handlers`; nothing is exported here: import from the defining module.
"""
