"""Log compaction for topics whose ``cleanup_policy`` includes compact (``compact`` or
``compact,delete``).

:mod:`~storage.cleaner.cleaner` holds :class:`LogCleaner` (choosing a log, the bounded
map and clean steps, the ``cleaner-offset-checkpoint``) and documents the algorithm;
:mod:`~storage.cleaner.clean_pass` a pass in progress and the segment grouping;
:mod:`~storage.cleaner.offset_map` the key -> latest offset map;
:mod:`~storage.cleaner.batch_filter` the byte-level record rules (which records stay, the
rewritten batch); :mod:`~storage.cleaner.txn_filter` which transactional batches and
markers a pass removes; :mod:`~storage.cleaner.swap` writing a cleaned segment and the crash-safe
``.cleaned`` / ``.swap`` / ``.deleted`` swap; :mod:`~storage.cleaner.config` the value
types.

Imports: ``clients.protocol``, ``clients.records`` and ``storage`` (the log, segments,
indexes, checkpoints, ``storage.file_io``); never ``replication`` or ``broker``.  The
package sits above :mod:`storage.log`: only ``storage.log.log`` uses it back, for the
record walk of :mod:`~storage.cleaner.batch_filter`.  Import names from their defining
module; this ``__init__`` exports nothing.
"""
