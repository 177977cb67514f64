"""PySpark integration: the ``minikafka`` data source (batch and streaming reads).

Public surface::

    register_data_source(spark) -> None     # spark.dataSource.register(MiniKafkaDataSource)
    MiniKafkaDataSource                     # format name "minikafka"
    SCHEMA                                  # the columns, as Spark's Kafka source

They are loaded on first use (PEP 562 ``__getattr__``), so modules of this package that
do not need Spark (the workload, the ledger) import without pyspark.
See :mod:`clients.spark.source` and docs/spark.md.
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
