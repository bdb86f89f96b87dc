"""A Spark session with settings that fit the job, locally or on a cluster.

Locally (``local[*]``, the default) the driver is the only JVM, so it gets the memory; the
Python workers are separate processes (one per core) that hold the engines. On a cluster
(``spark://host:7077``) only the job's SQL settings are applied; executors need this project
installed in the same Python (``PYSPARK_PYTHON``) so that ``matcher`` imports there.

Spark is kept quiet: its log4j logs errors only, py4j's Python logger warnings only, and the
line the JVM prints at every start (``WARNING: Using incubator modules``: Spark 4's launcher
always adds the Vector API module) is dropped from the JVM's stderr, which is otherwise
passed through as it is.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Final

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from pipeline.codes import ARROW_BATCH_ROWS

DEFAULT_MASTER: Final = "local[*]"
#: Fits a 2-core, 24 GiB box with room for the Python workers and the OS page cache (which
#: serves the Parquet files): the driver holds the broadcast plan and cached routed rows.
DRIVER_MEMORY: Final = "2g"
#: Locally the driver JVM also runs the tasks. The parallel collector, not G1 (the
#: default): the job is a batch that wants throughput, not short pauses. A cold one-shot
#: route of 10M messages x 10k subscriptions on 2 cores: 39.7-40.6 s wall against
#: 45.6-47.9 s with G1, which also warned "Retried waiting for GCLocker too often" on
#: Arrow's 16 MB buffers.
LOCAL_JVM_OPTIONS: Final = ("-XX:+UseParallelGC",)
#: Few shuffle partitions: the job shuffles only small aggregates (counts), never messages.
SHUFFLE_PARTITIONS: Final = 4

#: Settings the job's results depend on; ``job.run`` applies them to any session it is given.
JOB_SQL_CONF: Final[Mapping[str, str]] = {
    "spark.sql.session.timeZone": "UTC",  # `date` partitions are UTC days
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96: DuckDB, pyarrow
    "spark.sql.sources.partitionOverwriteMode": "static",  # overwrite replaces the whole table
    # The routed rows are cached only while the three tables are written: compressing them
    # cost more CPU than it saved (1M messages: ~1.4 CPU-s of ~5).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
}

_LOG4J2: Final = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# PySpark starts Spark as a shell, whose level is this logger's (WARN unless configured).
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = error
"""


#: Lines of the JVM's stderr that tell a user nothing, dropped.
JVM_NOISE: Final = frozenset({b"WARNING: Using incubator modules: jdk.incubator.vector"})


def jvm_started() -> bool:
    """Whether this process has started Spark's JVM already. PySpark keeps it for the life of
    the process, even after ``stop()`` (with the code earlier jobs had compiled)."""
    return SparkContext._gateway is not None


def _pass_stderr(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to ours, line by line, without the ``JVM_NOISE`` lines, until
    the JVM exits (a daemon thread: it never keeps this process alive)."""

    def pump() -> None:
        with stream:
            for line in stream:
                if line.rstrip(b"\r\n") in JVM_NOISE:
                    continue
                while line:  # where the JVM would have written it: file descriptor 2
                    line = line[os.write(2, line) :]

    threading.Thread(target=pump, name="spark-jvm-stderr", daemon=True).start()


def _start_jvm(conf: SparkConf) -> None:
    """Start the JVM for ``conf`` (as ``SparkSession.builder`` would) with its stderr read
    through ``_pass_stderr``, and make it this process's SparkContext."""
    # popen_kwargs is PySpark's documented hook for capturing the JVM's output.
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    _pass_stderr(gateway.proc.stderr)
    SparkContext(conf=conf, gateway=gateway)


def _quiet_logging_file() -> Path:
    """A log4j2 configuration that logs errors only (Spark's default logs every stage at
    WARN and INFO while starting)."""
    path = Path(tempfile.gettempdir()) / "topicstore-spark-log4j2.properties"
    if not path.exists() or path.read_text(encoding="utf-8") != _LOG4J2:
        # Written aside and renamed: another process may be starting its JVM with it.
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(_LOG4J2, encoding="utf-8")
        partial.replace(path)
    return path


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "topicstore-route",
    driver_memory: str = DRIVER_MEMORY,
    shuffle_partitions: int = SHUFFLE_PARTITIONS,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The session for ``master`` (default ``local[*]``; an existing session is returned as
    it is, as ``getOrCreate`` does). Under ``spark-submit`` pass no master: the one given to
    spark-submit is used."""
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or DEFAULT_MASTER
    local = not submitted and master.startswith("local")
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master)
    settings: dict[str, str] = {
        **JOB_SQL_CONF,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.ui.showConsoleProgress": "false",
    }
    if local:
        # Workers must run this interpreter, which has pyarrow and our packages.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        settings |= {
            "spark.driver.memory": driver_memory,
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": " ".join(
                (f"-Dlog4j2.configurationFile={_quiet_logging_file()}", *LOCAL_JVM_OPTIONS)
            ),
        }
    settings |= dict(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # logs every connection at INFO
    if not submitted and not jvm_started():
        _start_jvm(
            SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items()))
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
