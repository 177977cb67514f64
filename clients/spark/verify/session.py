"""The SparkSession of the verification CLI and the demo (not of the tests: they share
the ``spark`` fixture).

:func:`verify_session` checks for Java first (:data:`JAVA_HELP` says how to install it),
builds a session on any master with the ``minikafka`` data source registered, and on a
``local`` master tunes it for a short job on a small machine (see its docstring).  Its
console output (the JVM's and its Python workers') can go to a log file instead of the
terminal.  Costs: one JVM start (seconds).  Not thread-safe: call from one thread; one
session per process (Spark's rule).

:func:`failure_message` turns a failed Spark job's exception text into the one line the
CLI prints: Spark's error class and, for an error raised in our Python code (the data
source, a UDF), that exception's own message instead of the first lines of its traceback.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_HELP = ("Spark needs a Java 17 runtime and 'java' is not on PATH (nor in JAVA_HOME). "
             "Install one: 'sh scripts/ensure_java.sh' (Debian/Ubuntu, uses apt-get), "
             "'sudo apt-get install openjdk-17-jre-headless', or 'brew install openjdk@17' "
             "on macOS; then run this again.")


class VerifyError(RuntimeError):
    """The verification job could not run (Java missing, Spark or source failure)."""


def failure_message(text: str) -> str:
    """``[ERROR_CLASS] what Spark says: the cause`` from a PySparkException's text.

    Python tracebacks inside it end with ``module.ErrorType: message``: that message is
    the cause (e.g. ``NETWORK_EXCEPTION: no broker reachable: ...``)."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "no message"
    head = lines[0].split("Traceback (most recent call last):")[0].rstrip(": ")
    cause = ""
    for line in lines[1:]:
        if line.startswith("JVM stacktrace"):  # the Java side: not our cause
            break
        if line[:1].isspace():  # a traceback frame, its code, or the JVM's stack
            continue
        name, sep, message = line.partition(": ")
        if sep and name.replace(".", "").replace("_", "").isalnum():
            cause = message.strip()
    return f"{head}: {cause}" if cause else " | ".join(lines[:3])


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or bool(
        home and (Path(home) / "bin" / "java").exists())


def verify_session(master: str = "local[*]", app_name: str = "minikafka-verify",
                   spark_log: str | None = None) -> SparkSession:
    """A SparkSession for the CLI and the demo, with the ``minikafka`` source registered.

    On a ``local`` master it is tuned for a short job on a small machine: the JVM's C1
    compiler only (``-XX:TieredStopAtLevel=1``), whole-stage code generation off (no
    compile per query), no UI, ``SPARK_LOCAL_IP=127.0.0.1``.  Other masters get
    Spark's defaults.  ``spark_log``: the JVM's (and its Python workers') console output
    goes to this file instead of the terminal.
    """
    if not java_available():
        raise VerifyError(JAVA_HELP)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession

    from clients.spark.source import register_data_source

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 2)))
               .config("spark.sql.session.timeZone", "UTC"))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
                   .config("spark.sql.codegen.wholeStage", "false")
                   .config("spark.ui.enabled", "false"))
    with _stderr_to(spark_log):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark)
    return spark


@contextmanager
def _stderr_to(path: str | None) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the JVM is launched (it inherits it)."""
    if path is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
