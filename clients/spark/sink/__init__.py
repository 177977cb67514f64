"""The ``minikafka`` Spark sink: ``df.write.format("minikafka")`` and
``df.writeStream.format("minikafka")`` (at-least-once, as Spark's own Kafka sink).

Modules: :mod:`clients.spark.sink.options` (the sink's options and Spark's Kafka sink
columns, checked on the driver) and :mod:`clients.spark.sink.writer` (the batch and
stream writers; each Spark task sends its rows with one producer).  The data source
(:mod:`clients.spark.source`) returns these writers from ``writer`` / ``streamWriter``.
The exactly-once mode is :mod:`clients.spark.transactional_sink` (a ``foreachBatch``
function).  A batch write needs ``.mode("append")``: Spark refuses the default
``ErrorIfExists`` for every Python data source before the sink is asked (the exact code
path: :mod:`clients.spark.sink.writer`).  See docs/spark.md.
"""
