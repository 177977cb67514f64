"""Storage: everything a broker keeps on disk for its partitions.

Top-level modules: :mod:`~storage.log_manager` (all logs of one data directory, startup
and shutdown, periodic tasks), :mod:`~storage.log_dirs` (names in a data directory),
:mod:`~storage.segment` (one segment), :mod:`~storage.checkpoint` (offset and leader-epoch
checkpoint files), :mod:`~storage.producer_snapshot` (idempotent-producer snapshot
files), :mod:`~storage.file_io` (durable writes), :mod:`~storage.lock` (the data-directory
lock), :mod:`~storage.config` (``LogConfig``) and :mod:`~storage.errors`.  Subpackages:
:mod:`storage.index` (a segment's offset, time and transaction indexes),
:mod:`storage.records` (segment rescans), :mod:`storage.log` (one partition's log) and
:mod:`storage.cleaner` (compaction).

Imports: only ``clients.protocol``, ``clients.records``, ``clients.memory`` and
``storage`` itself; never ``replication``, ``broker`` or ``timer`` (callers pass clocks
in).  ``replication`` and ``broker`` build on it.  Import names from their defining
module; this ``__init__`` exports nothing.
"""
