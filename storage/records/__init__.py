"""Stored runs of record batches, walked below both ``storage.segment`` and ``storage.log``.

:mod:`~storage.records.scan` rescans a segment's bytes.  Imports ``clients.records`` and
``storage``'s index modules only; this ``__init__`` exports nothing.
"""
