"""One partition's log: segments on disk, their offsets, appends, reads, recovery.

Modules, one concept each:

* :mod:`~storage.log.log` -- :class:`Log`, the object other packages use: opening, the
  leader's record check, the flush policy, the lifecycle; every other public method is
  an explicit delegation to one of its four collaborators below.
* :mod:`~storage.log.appender` -- :class:`LogAppender` and :class:`LogAppendInfo`: leader
  appends (offsets assigned, epoch and append time stamped) and follower appends, cut
  across segments at batch boundaries, rolling before a part that does not fit.
* :mod:`~storage.log.segment_list` -- :class:`SegmentList`: the ordered segments, the
  active one, ``log_start_offset`` / ``log_end_offset`` / ``recovery_point``, and every
  edit of them (roll, truncation, restart, deletion of a prefix, cleaner swap, fsync).
* :mod:`~storage.log.reader` -- :class:`LogReader` (file regions, timestamp lookup, batch
  iteration; it only reads a SegmentList) and the value types it returns
  (:class:`FileRegion`, :class:`FetchDataInfo`, :class:`TimestampAndOffset`).
* :mod:`~storage.log.segment_policy` -- :class:`SegmentPolicy`: the LogConfig rules that
  decide when to roll and which segments retention deletes (no state).
* :mod:`~storage.log.recovery` (open-time load and repair), :mod:`~storage.log.validator`
  (the batch rules shared by appends and rescans), :mod:`~storage.log.invariants` (the
  structural check over a SegmentList), :mod:`~storage.log.txn_rebuild` (the segments'
  ``.txnindex`` checked against the batches at open, rebuilt from the log),
  :mod:`~storage.log.config_file` (``log.config``: the LogConfig the log was last given,
  what it opens and recovers with when its owner does not know the config yet).

Why this cut: the invariants that tie the segment list to its offsets (LEO = the active
segment's end, log start within the segments, the recovery point at or below the LEO)
are kept by the one class that changes either, so they can be read and checked in one
file; reading needs only a view of it, and the retention rules need only the config,
so each is a small object told exactly what it needs instead of a mixin that reads
fields another file sets.  Kafka draws a similar line between ``LocalLog`` (segments,
roll, truncate, flush) and ``UnifiedLog`` (appends, retention decisions).

Imports: ``clients.protocol``, ``clients.records`` and ``storage`` modules outside this
package (``storage.segment``, indexes, config, errors, ``storage.file_io``, the segment
scan of ``storage.records.scan``); never ``storage.cleaner``, ``replication`` or
``broker``.  Nothing outside this package that it imports imports it back.  Dependencies
inside run one way: ``log`` imports the others; ``appender`` imports ``segment_list``,
``segment_policy`` and ``validator``; ``reader`` and ``invariants`` import
``segment_list``; ``segment_list`` and ``segment_policy`` import ``storage.segment``;
``validator`` and ``recovery`` import ``storage.records.scan``; ``recovery`` imports
``txn_rebuild``, which imports ``storage.segment`` and ``storage.records.scan``;
``config_file`` imports ``storage.config`` and ``storage.file_io``.
Import names from their defining module; this ``__init__`` exports nothing.
"""
