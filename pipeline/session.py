"""A Spark session with settings that fit the job, locally or on a cluster.

Locally (``local[*]``, the default) the driver is the only JVM, so it gets the memory; the
Python workers are separate processes (one per core) that hold the engines. On a cluster
(``spark://host:7077``) only the job's SQL settings are applied; executors need this project
installed in the same Python (``PYSPARK_PYTHON``) so that ``matcher`` imports there.

A local driver JVM can start from a class-data archive (``class_archive``; AppCDS, Java's
own mechanism): Spark loads some 10,000 classes while it starts, and parsing and verifying
them is most of a cold start; mapping them from the archive roughly halves the start and the
first query. ``topicstore route`` keeps one in a directory it is given (``class_archive_in``
names the file): the first run that succeeds records it as its JVM exits (that run takes
longer, once; the archive takes ~170 MB; both the start and the end of the recording are
logged, so a user knows why), later runs map it. A run that fails keeps nothing
(``class_archive_complete`` is the caller's word that the JVM loaded what a whole job loads),
and a killed run's half-written recording goes when the next run records.
It is keyed by the PySpark install and the Java binary, written aside and renamed when
complete, and the JVM itself checks it against its classpath (a mismatched archive is
ignored, not trusted).

Spark is kept quiet: its log4j logs errors only, py4j's Python logger warnings only, and the
line the JVM prints at every start (``WARNING: Using incubator modules``: Spark 4's launcher
always adds the Vector API module) is dropped from the JVM's stderr, which is otherwise
passed through as it is.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Final

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from pipeline.codes import ARROW_BATCH_ROWS

log = logging.getLogger(__name__)

DEFAULT_MASTER: Final = "local[*]"
#: Fits a 2-core, 24 GiB box with room for the Python workers and the OS page cache (which
#: serves the Parquet files): the driver holds the broadcast plan and cached routed rows.
DRIVER_MEMORY: Final = "2g"
#: Locally the driver JVM also runs the tasks. The parallel collector, not G1 (the
#: default): the job is a batch that wants throughput, not short pauses (G1 made a cold
#: one-shot route slower, and warned "Retried waiting for GCLocker too often" on Arrow's
#: 16 MB buffers).
LOCAL_JVM_OPTIONS: Final = ("-XX:+UseParallelGC",)
#: About what the class archive of Spark 4 takes on disk (said when recording one).
ARCHIVE_MB: Final = 170
#: How long an exiting JVM may take to write the archive before it is given up.
ARCHIVE_EXIT_TIMEOUT_S: Final = 120.0
#: Few shuffle partitions: the job shuffles only small aggregates (counts), never messages.
SHUFFLE_PARTITIONS: Final = 4

#: Settings the job's results depend on; ``job.run`` applies them to any session it is given.
JOB_SQL_CONF: Final[Mapping[str, str]] = {
    "spark.sql.session.timeZone": "UTC",  # `date` partitions are UTC days
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
    # No byte bound besides the rows': below Int.MaxValue Spark sizes its Arrow buffers after
    # every row it adds to a batch for the Python workers (BatchedPythonArrowInput), a fifth
    # of the JVM's samples on a 2M-message route; 10,000 messages are a few MB anyway.
    "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",  # not INT96: DuckDB, pyarrow
    "spark.sql.sources.partitionOverwriteMode": "static",  # overwrite replaces the whole table
    # The routed rows are cached only while the three tables are written: compressing them
    # cost more CPU than it saved (1M messages: ~1.4 CPU-s of ~5).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # A partitioned write sorted each task's rows by `kind` and `date` first (millions of
    # rows per task on local[2]); a task's messages span a day or two, of deliveries and
    # unmatched messages, so it writes up to four partitions at once unsorted instead, and
    # Spark sorts only what a fifth one would need (each open writer buffers up to a Parquet
    # row group: four bound the memory, and the deliveries' is the only large one).
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "4",
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


def class_archive_in(directory: Path, java_home: str | None = None) -> Path:
    """The class-data archive's file in ``directory`` (see the module docstring). Its name
    holds a key of the PySpark install, the Java binary (``java_home``'s, else the one on
    the ``PATH``) and the JVM options, so an upgrade of either starts a new archive instead
    of offering the JVM a stale one."""
    java = shutil.which("java", path=f"{java_home}/bin" if java_home else None) or "java"
    java = os.path.realpath(java)
    stamp = os.stat(java).st_mtime_ns if os.path.exists(java) else 0
    spark_home = Path(pyspark.__file__).parent
    key = f"{pyspark.__version__}|{spark_home}|{java}|{stamp}|{' '.join(LOCAL_JVM_OPTIONS)}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return directory / f"spark-{pyspark.__version__}-{digest}.jsa"


def _archive_options(archive: Path | None) -> tuple[list[str], Path | None]:
    """The JVM options for ``archive`` and, when this JVM records it, where it writes it
    (aside, by pid: renamed into place only once the JVM has exited cleanly)."""
    if archive is None:
        return [], None
    quiet = "-Xlog:cds*=error"  # not a warning per class it cannot archive (signed jars...)
    if archive.is_file():
        return [f"-XX:SharedArchiveFile={archive}", quiet], None
    archive.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_recordings(archive.parent)
    recording = archive.with_name(f".{archive.name}.{os.getpid()}")
    # The one run that records takes up to a minute longer (written as its JVM exits): say
    # why, once, rather than leave a newcomer watching a quiet terminal.
    log.info(
        "recording Spark's class archive (once per Spark and Java, about %d MB; this run "
        "takes up to a minute longer, later runs start faster): %s",
        ARCHIVE_MB,
        archive,
    )
    return [f"-XX:ArchiveClassesAtExit={recording}", quiet], recording


def _remove_stale_recordings(directory: Path) -> None:
    """Remove recordings left by runs that were killed before their exit could (each is
    named by its run's pid and holds up to a whole archive); a live run's stays."""
    for left in directory.glob(".spark-*.jsa.*"):
        pid = left.suffix[1:]
        if pid.isdigit() and not _alive(int(pid)):
            left.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


#: Set by ``class_archive_complete``: the archive this process's JVM records is worth keeping.
_archive_complete = threading.Event()


def class_archive_complete() -> None:
    """Keep the class archive this process's JVM is recording (a whole job ran), if any."""
    _archive_complete.set()


def _keep_archive(proc: subprocess.Popen[bytes], recording: Path, archive: Path) -> None:
    """At exit: end the JVM (its stdin closing is PySpark's signal), wait while it writes
    the archive, and put it in place if the caller said the run was complete; anything else
    is removed. A run that is not complete keeps nothing, so its JVM is killed rather than
    waited for: writing the archive is most of a recording JVM's exit."""
    if not _archive_complete.is_set():
        proc.kill()
        proc.wait()
        recording.unlink(missing_ok=True)
        return
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=ARCHIVE_EXIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        log.warning("Spark's JVM did not exit in time; its class archive is not kept")
        proc.kill()
        proc.wait()
    complete = proc.returncode == 0
    if complete and recording.is_file() and recording.stat().st_size > 0:
        os.replace(recording, archive)
        size = archive.stat().st_size / 1e6
        log.info("recorded Spark's class archive (%.0f MB): %s", size, archive)
    else:
        recording.unlink(missing_ok=True)


def _start_jvm(conf: SparkConf, recording: Path | None = None, archive: Path | None = None) -> None:
    """Start the JVM for ``conf`` (as ``SparkSession.builder`` would) with its stderr read
    through ``_pass_stderr``, and make it this process's SparkContext. When the JVM records
    a class archive, it is put in place at exit (registered before the SparkContext, so it
    runs after PySpark's own exit handlers)."""
    # popen_kwargs is PySpark's documented hook for capturing the JVM's output.
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})  # type: ignore[no-untyped-call]
    _pass_stderr(gateway.proc.stderr)
    if recording is not None and archive is not None:
        atexit.register(_keep_archive, gateway.proc, recording, archive)
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
    class_archive: Path | None = None,
) -> SparkSession:
    """The session for ``master`` (default ``local[*]``; an existing session is returned as
    it is, as ``getOrCreate`` does). Under ``spark-submit`` pass no master: the one given to
    spark-submit is used. ``class_archive``: the class-data archive a local JVM started here
    maps, or records when there is none yet (see the module docstring; None: neither)."""
    submitted = master is None and "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or DEFAULT_MASTER
    local = not submitted and master.startswith("local")
    starting = not submitted and not jvm_started()
    archive_options, recording = _archive_options(class_archive if local and starting else None)
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
                (
                    f"-Dlog4j2.configurationFile={_quiet_logging_file()}",
                    *LOCAL_JVM_OPTIONS,
                    *archive_options,
                )
            ),
        }
    settings |= dict(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # logs every connection at INFO
    if starting:
        _start_jvm(
            SparkConf().setMaster(master).setAppName(app_name).setAll(list(settings.items())),
            recording,
            class_archive,
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
