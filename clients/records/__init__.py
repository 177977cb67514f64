"""Kafka RecordBatch v2 (magic 2): the unit stored on disk and carried on the wire.

Modules, one concept each:

- :mod:`~clients.records.batch`: the 61-byte batch header (byte table, the one ``HEADER``
  layout), its constants, read/validate/walk/stamp and :func:`assemble_batch`;
- :mod:`~clients.records.varint`: zig-zag varints of record fields;
- :mod:`~clients.records.record`: the record layout (byte table) and the simple
  per-record path, :func:`build_batch` and :func:`decode_batch`;
- :mod:`~clients.records.bulk_encode`, :mod:`~clients.records.bulk_decode` and
  :mod:`~clients.records.bulk_varint`: the vectorised (numpy) path for many records at
  once; it produces and accepts identical bytes;
- :mod:`~clients.records.compression`: Kafka's codecs (gzip, snappy, lz4, zstd) for the
  records section of a batch, bounded decompression, batch-level compress/decompress;
- :mod:`~clients.records.control`: transaction markers (Kafka's EndTransactionMarker),
  the control batch that commits or aborts a producer's transaction on a partition.

A foundation of the code base: ``storage``, ``replication`` and ``broker`` may import it.
Imports only :mod:`clients.protocol.errors` (and the cramjam codec library) from
outside this package.  No public re-exports here: import each name from the module that
defines it.
"""
