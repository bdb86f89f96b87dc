"""The ``route_scale`` table: ``topicstore route`` at scale on a workload we did not tune the
engines for (issue 33's): 9,999 subscriptions of 2 to 5 words over 300 words (30% with a
``*``, 15% with a ``#``), topics of 2 to 5 words over 60 of them: about 1.9 deliveries per
message and a quarter of the messages unmatched (``harness.workloads.route_patterns``,
``route_topics``).

Four rows, each from a real ``topicstore`` process, as a user runs it:

* **batch**: ``topicstore route`` one shot from a cold JVM (a new process) over all the
  messages: wall, msg/s, the job's own stages (``_summary.json``) and the CPU seconds of the
  process tree (the JVM and its Python workers);
* **stream, sustained**: ``topicstore route --follow`` (1 s trigger) while the same messages
  land as files faster than it routes them: msg/s from the first file landing to the last
  batch committed;
* **stream, latency**: the same with ``LATENCY_RATE`` msg/s landing as one file a second:
  per file, seconds from its landing (the rename into the directory) to its deliveries being
  visible to DuckDB (a poller reads the table's newest version through delta-rs and DuckDB),
  p50 and p99;
* **data files**: the table's data files after those batches, then after one
  ``topicstore table compact``; an hour of 1 s batches is 3,600 of them, so the files an hour
  leaves are the per-batch figure times 3,600 (said in the notes).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.report import Column, Table
from harness.workloads import ROUTE_SEED, export_table, route_patterns, route_topics
from pipeline.maintenance import compact

log = logging.getLogger(__name__)

MASTER: Final = "local[2]"
SUBSCRIBERS: Final = 500
DAYS: Final = 3
ROW_GROUP: Final = 100_000
TARGET_MSG_S: Final = 250_000
#: The latency row: messages landing per second (one file a second) and the trigger.
LATENCY_RATE: Final = 10_000
TRIGGER_S: Final = 1.0
TARGET_P50_S: Final = 5.0
TARGET_P99_S: Final = 10.0
#: Batches of a 1 s trigger in an hour.
HOUR_BATCHES: Final = 3_600
#: How often the latency poller asks DuckDB for the newest visible message.
POLL_S: Final = 0.1
START: Final = datetime(2024, 1, 1, tzinfo=UTC)
BATCH_ROW: Final = "batch: route, cold JVM"
STREAM_ROW: Final = "stream: sustained, files landing"
LATENCY_ROW: Final = "stream: landed -> visible in DuckDB"
FILES_ROW: Final = "data files"
ROWS: Final = (BATCH_ROW, STREAM_ROW, LATENCY_ROW, FILES_ROW)


def message_table(first: int, count: int, topics: pa.Array, total: int) -> pa.Table:
    """Messages ``first`` .. ``first + count - 1`` of ``total``: ids ``m%010d`` (ordered as
    sent), ``topics`` theirs, message ``k`` sent at ``k`` x (``DAYS`` days / ``total``)."""
    ks = np.arange(first, first + count, dtype=np.int64)
    ids = pc.binary_join_element_wise(
        "m", pc.utf8_lpad(pa.array(ks).cast(pa.string()), 10, "0"), ""
    )
    step_us = DAYS * 86_400_000_000 // max(1, total)
    start_us = int(START.timestamp() * 1_000_000)
    ts = pa.array(start_us + ks * step_us, pa.timestamp("us", tz="UTC"))
    return pa.table({"message_id": ids, "topic": topics, "ts": ts})


def write_messages(path: Path, count: int, seed: int = ROUTE_SEED) -> None:
    """``count`` messages of the workload as one Parquet file (row groups of
    ``ROW_GROUP``)."""
    table = message_table(0, count, route_topics(count, seed), count)
    pq.write_table(table, path, row_group_size=ROW_GROUP)


def write_subscriptions(path: Path, seed: int = ROUTE_SEED) -> int:
    """The workload's subscriptions as a ``topicstore export`` file; returns how many."""
    patterns = route_patterns(seed=seed)
    count = len(patterns)
    table = export_table(patterns, SUBSCRIBERS, START)
    pq.write_table(table, path)
    return count


def _cpu_s(pid: int) -> tuple[str, float] | None:
    """The command name of process ``pid`` and its user + system CPU seconds so far
    (threads included)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            head, tail = stat.read().rsplit(")", 1)
    except OSError:
        return None
    fields = tail.split()
    return head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


class TreeCpu:
    """CPU seconds of a process and every descendant (Spark's JVM, its Python daemon and
    workers), sampled from ``/proc`` every ``interval_s``: ``time -v`` misses the JVM, which
    its launcher never waits for. A process's last sample counts, so a short-lived one
    (none in a route) could be missed by up to an interval."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self._pid = pid
        self._interval_s = interval_s
        self._seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        tree = _children()
        todo = [self._pid]
        while todo:
            pid = todo.pop()
            found = _cpu_s(pid)
            if found is not None:
                self._seen[pid] = found
            todo += tree.get(pid, [])

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def stop(self) -> float:
        """Stop sampling (after a last sample); the CPU seconds seen."""
        self._sample()
        self._stop.set()
        self._thread.join()
        return sum(cpu for _, cpu in self._seen.values())

    def by_command(self) -> dict[str, float]:
        """CPU seconds by command name (``java``, ``python``), after ``stop``."""
        out: dict[str, float] = {}
        for name, cpu in self._seen.values():
            out[name] = out.get(name, 0.0) + cpu
        return out


@dataclass(frozen=True, slots=True)
class BatchRun:
    """One ``topicstore route`` process: wall seconds of the process (JVM start included),
    CPU seconds of its tree, its summary (``_summary.json``), the load average before and
    after."""

    wall_s: float
    cpu_s: float
    cpu_by_command: dict[str, float]
    summary: dict[str, object]
    load: tuple[float, float]

    @property
    def msg_s(self) -> float:
        messages = self.summary["messages"]
        assert isinstance(messages, int)
        return messages / self.wall_s


def route_command(*args: str) -> list[str]:
    """``topicstore`` as a user runs it, through this interpreter."""
    return [sys.executable, "-m", "pipeline.cli", *args]


def _route(messages: Path, subscriptions: Path, out: Path, *options: str) -> list[str]:
    """``topicstore route`` over these files on ``MASTER``, with ``options``."""
    return route_command(
        "route",
        *options,
        "--messages",
        str(messages),
        "--subscriptions",
        str(subscriptions),
        "--out",
        str(out),
        "--master",
        MASTER,
    )


def run_batch(
    messages: Path, subscriptions: Path, out: Path, checkout: Path | None = None
) -> BatchRun:
    """``topicstore route`` one shot in a new process (a cold JVM) on ``local[2]``; with
    ``checkout``, that checkout's code (an A/B against another build)."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    shutil.rmtree(out, ignore_errors=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(
        _route(messages, subscriptions, out),
        env=env,
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    cpu = TreeCpu(process.pid)
    output, _ = process.communicate()
    wall = time.perf_counter() - started
    cpu_s = cpu.stop()
    if process.returncode != 0:
        raise RuntimeError(f"route failed ({process.returncode}): {output.decode()[-2000:]}")
    summary = json.loads((out / "_summary.json").read_text(encoding="utf-8"))
    return BatchRun(wall, cpu_s, cpu.by_command(), summary, (load_before, os.getloadavg()[0]))


#: A progress line of the stream (``pipeline.stream.BatchProgress.line``).
_BATCH_LINE: Final = re.compile(r"^batch (\d+): ([\d,]+) messages in ")
#: The latency phase's messages are sent on a day of their own, so the poller's DuckDB query
#: reads only their partition.
LATENCY_DAY: Final = datetime(2024, 2, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class StreamRun:
    """One ``topicstore route --follow`` process: the sustained phase (messages, seconds
    from the first file landing to the last batch committed, CPU seconds of the process
    tree meanwhile, batches), the latency phase (seconds from landing to visible in DuckDB,
    per file) and the table's data files (before the latency phase, after it, after one
    compaction)."""

    messages: int
    seconds: float
    cpu_s: float
    batches: int
    latencies: list[float]
    latency_batches: int
    files: tuple[int, int, int]
    load: tuple[float, float]


class _Progress:
    """The stream's stdout, read by a thread: messages routed so far, and batches."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.messages = 0
        self.batches = 0
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            found = _BATCH_LINE.match(line)
            with self._changed:
                self.lines.append(line)
                if found:
                    self.messages += int(found.group(2).replace(",", ""))
                    self.batches += 1
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # end of output
            self._changed.notify_all()

    def wait_for(self, messages: int, timeout_s: float) -> float:
        """Wait until ``messages`` are routed; the time (``time.time``) they were."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.messages < messages:
                left = deadline - time.monotonic()
                if left <= 0 or (self.lines and self.lines[-1] == ""):
                    tail = "\n".join(self.lines[-20:])
                    raise RuntimeError(
                        f"the stream routed {self.messages:,} of {messages:,}:\n{tail}"
                    )
                self._changed.wait(min(left, 1.0))
        return time.time()


def _pending_files(
    directory: Path, first: int, files: int, per_file: int, total: int, day: datetime | None
) -> list[Path]:
    """``files`` Parquet files of ``per_file`` messages from message ``first`` on, written
    under ``directory`` (to be renamed into the landing directory); ``day``: all sent on
    that day instead of spread over ``DAYS``."""
    directory.mkdir(parents=True, exist_ok=True)
    count = files * per_file
    topics = route_topics(first + count)[first:]
    paths = []
    for i in range(files):
        start = first + i * per_file
        table = message_table(start, per_file, topics[i * per_file : (i + 1) * per_file], total)
        if day is not None:
            at = pa.array([day] * per_file, pa.timestamp("us", tz="UTC"))
            table = table.set_column(2, "ts", at)
        path = directory / f"{start:012d}.parquet"
        pq.write_table(table, path, row_group_size=ROW_GROUP)
        paths.append(path)
    return paths


def _land(path: Path, landing: Path) -> float:
    """Move ``path`` into ``landing`` whole (a rename); when it landed."""
    path.replace(landing / path.name)
    return time.time()


def _visible_frontier(table: Path) -> str | None:
    """The newest message id of the latency phase DuckDB sees in the table's newest
    version (deliveries and unmatched), through delta-rs as ``topicstore analytics``
    reads it."""
    import duckdb

    from pipeline import delta

    if not delta.is_table(table):
        return None
    rows = delta.dataset(table)
    conn = duckdb.connect(":memory:")
    try:
        conn.register("routed", rows)
        found = conn.execute(
            "SELECT max(message_id) FROM routed WHERE date = ? "
            "AND kind IN ('deliveries', 'unmatched')",
            [LATENCY_DAY.date()],
        ).fetchone()
    finally:
        conn.close()
    return None if found is None else found[0]


def _data_files(table: Path) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(table)).file_uris())


def run_stream(
    root: Path,
    subscriptions: Path,
    messages: int,
    per_file: int,
    latency_s: int,
    checkout: Path | None = None,
) -> StreamRun:
    """``topicstore route --follow`` (``TRIGGER_S``) in a new process: a warm-up file, then
    ``messages`` landing as files of ``per_file`` faster than it routes them, then
    ``LATENCY_RATE`` messages a second for ``latency_s`` seconds; then one compaction."""
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    landing, out = root / "landing", root / "stream-out"
    for directory in (landing, out):
        shutil.rmtree(directory, ignore_errors=True)
    landing.mkdir(parents=True)
    files = max(1, messages // per_file)
    messages = files * per_file
    warmup = _pending_files(root / "pending-warmup", 0, 1, LATENCY_RATE, messages, None)
    sustained = _pending_files(root / "pending", LATENCY_RATE, files, per_file, messages, None)
    first_late = LATENCY_RATE + messages
    late = _pending_files(
        root / "pending-late", first_late, latency_s, LATENCY_RATE, messages, LATENCY_DAY
    )
    load_before = os.getloadavg()[0]
    process = subprocess.Popen(
        _route(landing, subscriptions, out, "--follow", "--trigger-interval", str(TRIGGER_S)),
        env=env,
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None
        progress = _Progress(process.stdout)
        _land(warmup[0], landing)
        progress.wait_for(LATENCY_RATE, timeout_s=600)
        batches_before = progress.batches
        cpu = TreeCpu(process.pid)
        cpu_before = cpu.stop()
        cpu = TreeCpu(process.pid)
        started = time.time()
        for path in sustained:
            _land(path, landing)
            time.sleep(per_file / (4 * TARGET_MSG_S))  # lands at 4x the target
        done = progress.wait_for(LATENCY_RATE + messages, timeout_s=3_600)
        cpu_s = cpu.stop() - cpu_before
        batches = progress.batches - batches_before
        files_before = _data_files(out)
        latency_batches = progress.batches
        latencies = _latency_phase(late, landing, out, first_late)
        progress.wait_for(LATENCY_RATE + messages + latency_s * LATENCY_RATE, timeout_s=600)
        latency_batches = progress.batches - latency_batches
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    files_after = _data_files(out)
    compact(out)  # what `topicstore table compact` runs
    compacted = _data_files(out)
    return StreamRun(
        messages,
        done - started,
        cpu_s,
        batches,
        latencies,
        latency_batches,
        (files_before, files_after, compacted),
        (load_before, os.getloadavg()[0]),
    )


def _latency_phase(files: list[Path], landing: Path, table: Path, first: int) -> list[float]:
    """Land ``files`` one a second; per file, seconds from landing to DuckDB seeing it."""
    landed: list[float] = []
    seen: list[float] = []
    firsts = [first + i * LATENCY_RATE for i in range(len(files))]
    next_land = time.time()
    deadline = next_land + len(files) + 300
    while len(seen) < len(files) and time.time() < deadline:
        now = time.time()
        if len(landed) < len(files) and now >= next_land:
            landed.append(_land(files[len(landed)], landing))
            next_land += 1.0
        frontier = _visible_frontier(table)
        if frontier is not None:
            newest = int(frontier[1:])
            while len(seen) < len(landed) and newest >= firsts[len(seen)]:
                seen.append(time.time())
        time.sleep(POLL_S)
    if len(seen) < len(files):
        raise RuntimeError(f"only {len(seen)} of {len(files)} files became visible")
    return [s - land for s, land in zip(seen, landed, strict=True)]


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q * 100, method="nearest"))


def run_route_scale(messages: int, per_file: int, latency_s: int) -> Table:
    """The table: the batch route and the stream over ``messages`` of the workload (landing
    as files of ``per_file``), the latency phase of ``latency_s`` files, the data files."""
    with tempfile.TemporaryDirectory(prefix="topicstore-route-scale-") as scratch:
        root = Path(scratch)
        subs = root / "subs.parquet"
        subscriptions = write_subscriptions(subs)
        write_messages(root / "messages.parquet", messages)
        batch = run_batch(root / "messages.parquet", subs, root / "batch-out")
        (root / "messages.parquet").unlink()
        stream = run_stream(root, subs, messages, per_file, latency_s)
    return _table(subscriptions, batch, stream)


def _table(subscriptions: int, batch: BatchRun, stream: StreamRun) -> Table:
    summary = batch.summary
    messages = summary["messages"]
    deliveries = summary["deliveries"]
    unmatched = summary["unmatched"]
    assert isinstance(messages, int) and isinstance(deliveries, int)
    assert isinstance(unmatched, int)
    table = Table(
        name="route_scale",
        title=(
            f"topicstore route at scale: {messages:,} messages x {subscriptions:,} "
            f"subscriptions, {deliveries / messages:.2f} deliveries per message, "
            f"{unmatched / messages:.0%} unmatched, Spark {MASTER}"
        ),
        columns=[
            Column("run", "{}"),
            Column("messages", "{:,}"),
            Column("seconds", "{:,.1f}"),
            Column("msg/s", chart=True),
            Column("CPU s", "{:,.1f}"),
            Column("detail", "{}"),
        ],
        unit="messages per second",
    )
    stages = summary["stages_s"]
    assert isinstance(stages, dict)
    table.rows.append(
        [
            BATCH_ROW,
            messages,
            batch.wall_s,
            batch.msg_s,
            batch.cpu_s,
            "job stages " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()),
        ]
    )
    table.rows.append(
        [
            STREAM_ROW,
            stream.messages,
            stream.seconds,
            stream.messages / stream.seconds,
            stream.cpu_s,
            f"{stream.batches} batches",
        ]
    )
    p50, p99 = _percentile(stream.latencies, 0.5), _percentile(stream.latencies, 0.99)
    table.rows.append(
        [
            LATENCY_ROW,
            len(stream.latencies) * LATENCY_RATE,
            len(stream.latencies),
            None,
            None,
            f"p50 {p50:.1f} s, p99 {p99:.1f} s, worst {max(stream.latencies):.1f} s "
            f"({len(stream.latencies)} files, {stream.latency_batches} batches)",
        ]
    )
    before, after, compacted = stream.files
    per_batch = (after - before) / max(1, stream.latency_batches)
    table.rows.append(
        [
            FILES_ROW,
            None,
            None,
            None,
            None,
            f"{after:,} after {stream.batches + stream.latency_batches + 1} batches "
            f"({per_batch:.1f} per 1 s batch: ~{per_batch * HOUR_BATCHES:,.0f} an hour), "
            f"{compacted:,} after one compaction",
        ]
    )
    rate = batch.msg_s
    stream_rate = stream.messages / stream.seconds
    met = {True: "met", False: "NOT met"}
    table.notes += [
        f"targets: >= {TARGET_MSG_S:,} msg/s end to end, batch ({met[rate >= TARGET_MSG_S]}) "
        f"and stream ({met[stream_rate >= TARGET_MSG_S]}); landed -> visible p50 <= "
        f"{TARGET_P50_S:.0f} s ({met[p50 <= TARGET_P50_S]}), p99 <= {TARGET_P99_S:.0f} s "
        f"({met[p99 <= TARGET_P99_S]})",
        "batch: one `topicstore route` process, a cold JVM (the class archive mapped), "
        "seconds from the process starting to it exiting; CPU s: the process, the JVM and "
        "the Python workers (sampled from /proc)",
        f"stream: one `topicstore route --follow` process, {TRIGGER_S:.0f} s trigger, "
        f"warmed by one file of {LATENCY_RATE:,}; then the messages land as files faster "
        f"than it routes them (seconds from the first landing to the last commit); then "
        f"{LATENCY_RATE:,} msg/s land as one file a second, and a poller asks DuckDB for the "
        f"newest visible message every {POLL_S} s",
        f"workload: harness.workloads.route_patterns / route_topics (seed {ROUTE_SEED}): "
        f"{deliveries:,} deliveries = {deliveries / messages:.2f} per message, "
        f"{unmatched:,} unmatched = {unmatched / messages:.1%}",
        f"1-minute load average {batch.load[0]:.1f} before the batch, {stream.load[1]:.1f} "
        f"after the stream, on {os.cpu_count()} CPUs",
    ]
    return table
