"""Spark test fixtures: ONE local SparkSession for the whole test run (DESIGN.md §7).

``spark`` is session-scoped: ``local[2]`` (the machine has 2 cores), 2 shuffle
partitions, no UI, ERROR-level logs, and the ``minikafka`` data source registered.
Every Spark test module (the data source's and the verification jobs') uses it; starting
the JVM once keeps the Spark tests' time small.  The session is stopped at the end of
the run.

Spark's Python workers run ``sys.executable`` so they import the same ``clients``
package as the test process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from clients.spark.source import register_data_source  # noqa: E402


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("minikafka-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_data_source(session)
    try:
        yield session
    finally:
        session.stop()
