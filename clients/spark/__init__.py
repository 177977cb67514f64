"""PySpark integration: the ``minikafka`` data source (batch and streaming reads).

Public surface::

    register_data_source(spark) -> None     # spark.dataSource.register(MiniKafkaDataSource)
    MiniKafkaDataSource                     # format name "minikafka"
    SCHEMA                                  # the columns, as Spark's Kafka source

See :mod:`clients.spark.source` and docs/spark.md.
"""

from __future__ import annotations

from clients.spark.source import SCHEMA, MiniKafkaDataSource, register_data_source

__all__ = ["SCHEMA", "MiniKafkaDataSource", "register_data_source"]
