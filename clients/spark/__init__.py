"""PySpark integration: the ``minikafka`` data source (batch and streaming reads).

Public surface::

    register_data_source(spark) -> None     # spark.dataSource.register(MiniKafkaDataSource)
    MiniKafkaDataSource                     # format name "minikafka"
    SCHEMA                                  # the columns, as Spark's Kafka source

They are loaded on first use (PEP 562 ``__getattr__``), so modules of this package that
do not need Spark import without pyspark.
See :mod:`clients.spark.source` and docs/spark.md.  Project code imports them from
:mod:`clients.spark.source`.

Also here: the source's options, offset ranges and partition reader; the Spark
verification job (:mod:`clients.spark.verify`: the job, its session, the transactional
checks), the streaming job (``stream_to_parquet``), the at-least-once sink behind
``format("minikafka")`` writes (:mod:`clients.spark.sink`) and the transactional sink.  The
workload that verify checks lives in :mod:`clients.workload` (no Spark).

May import the producer, consumer and admin client and the rooms below them; never
``broker``, ``replication`` or ``storage`` (faults reach a local cluster through
``python -m broker.cluster`` processes), nor ``clients.cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clients.spark.source import SCHEMA, MiniKafkaDataSource, register_data_source

__all__ = ["SCHEMA", "MiniKafkaDataSource", "register_data_source"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from clients.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'clients.spark' has no attribute {name!r}")
