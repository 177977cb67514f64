"""The indexes of one segment, each a file beside its ``.log`` and derived from it.

Modules, one concept each:

* :mod:`~storage.index.offset_index` -- ``.index``: offset to file position (sparse), and
  :class:`~storage.index.offset_index.MappedIndex`, the memory-mapped fixed-entry file
  both mapped indexes build on;
* :mod:`~storage.index.time_index` -- ``.timeindex``: timestamp to offset (sparse);
* :mod:`~storage.index.txn_index` -- ``.txnindex``: the segment's aborted transactions
  (Kafka's format), what a ``read_committed`` fetch returns beside its records.

Imports ``storage.errors`` and ``storage.file_io`` only (and numpy); the segment
(:mod:`storage.segment`), the rescan (:mod:`storage.records.scan`), the log and the
cleaner build on it.  This ``__init__`` exports nothing.
"""
