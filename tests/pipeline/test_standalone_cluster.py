"""The route job on a real Spark standalone cluster: a master and a worker started from
pyspark's own ``spark-class`` (as ``docker-compose.yml`` starts them), and ``topicstore
route --master spark://…`` run as a user runs it, in its own process. The executors are the
worker's, not the driver's: they import ``matcher`` in their own Python processes, so this
is the test that the job's code really ships to a cluster. Its deliveries must equal the
naive matcher's.

The streaming route (``route --available-now``) runs on the same cluster: its micro-batches
are routed by the worker's executors and committed by the driver.

Slow by nature (three JVMs start: about 30 s on two cores), so the two tests share one
cluster.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
from deltalake import DeltaTable

from harness.server import free_port, service_environment, topicstore_command
from tests.pipeline.conftest import Generated, generate, naive_deliveries

START_TIMEOUT_S: Final = 120.0
ROUTE_TIMEOUT_S: Final = 300.0
_ROOT: Final = Path(__file__).resolve().parents[2]


def _environment() -> dict[str, str]:
    """Every JVM binds to loopback; executors run this interpreter with this checkout."""
    env = service_environment({})
    env |= {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }
    return env


def _spark_class(*args: str, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"  # pip's Spark home
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_class), *args], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def _wait_for_worker(ui: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the master's status page lists one ALIVE worker."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the Spark master exited:\n{log.read_text(errors='replace')}")
        try:
            status = httpx.get(f"{ui}/json/", timeout=5).json()
        except (httpx.TransportError, ValueError):
            status = {}
        if any(w.get("state") == "ALIVE" for w in status.get("workers", [])):
            return
        time.sleep(0.5)
    pytest.fail(f"no worker registered with the master:\n{log.read_text(errors='replace')}")


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:port
    work: Path  # the worker's directory: one app-*/N/ per executor it launched


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master with one worker (2 cores, 1 GiB)."""
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = _environment()
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    with ExitStack() as stack:
        master_log = logs / "master.log"
        master = _spark_class(
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
            log=master_log,
            env=env,
        )
        stack.callback(_stop, master)
        worker = _spark_class(
            "org.apache.spark.deploy.worker.Worker",
            *("--host", "127.0.0.1", "--webui-port", str(worker_ui)),
            *("--cores", "2", "--memory", "1g", "--work-dir", str(logs / "work")),
            master_url,
            log=logs / "worker.log",
            env=env,
        )
        stack.callback(_stop, worker)
        _wait_for_worker(f"http://127.0.0.1:{ui_port}", master, master_log)
        yield Cluster(master_url, logs / "work")


def _inputs(tmp_path: Path, data: Generated, messages: Path) -> Path:
    """The subscriptions export and the messages (Parquet at ``messages``); the export."""
    subscriptions = tmp_path / "subs.parquet"
    pq.write_table(data.subscriptions_table(), subscriptions)
    ids, tenants, topics = zip(*data.messages, strict=True)
    pq.write_table(
        pa.table(
            {
                "message_id": list(ids),
                "tenant": list(tenants),
                "topic": list(topics),
                "ts": pa.array([1_714_557_600_000_000] * len(ids), pa.timestamp("us", "UTC")),
            }
        ),
        messages,
    )
    return subscriptions


def _route(cluster: Cluster, tmp_path: Path, *args: str) -> str:
    """``topicstore route --master CLUSTER ARGS`` in its own process; its output. Its
    executors must be the cluster's: the worker launched one for this application."""
    apps = set(cluster.work.glob("app-*"))
    result = subprocess.run(
        [*topicstore_command(), "route", "--master", cluster.url, *args],
        env=_environment(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=ROUTE_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (app,) = set(cluster.work.glob("app-*")) - apps
    assert list(app.glob("*/stderr")), "no executor ran on the worker"
    return result.stdout


def _check_deliveries(out: Path, data: Generated) -> None:
    deliveries = DeltaTable(str(out)).to_pyarrow_table(
        columns=["message_id", "subscription_id", "subscriber", "tenant"],
        filters=[("kind", "=", "deliveries")],
    )
    got = set(zip(*(deliveries.column(i).to_pylist() for i in range(4)), strict=True))
    expected = naive_deliveries(data)
    assert expected, "the generated workload must deliver something"
    assert got == expected


def test_route_on_a_standalone_cluster(cluster: Cluster, tmp_path: Path) -> None:
    data = generate(subscriptions=300, messages=2_000, seed=11, tenants=("default", "acme"))
    messages = tmp_path / "messages.parquet"
    subscriptions = _inputs(tmp_path, data, messages)
    out = tmp_path / "out"
    printed = _route(
        cluster,
        tmp_path,
        *("--messages", str(messages), "--subscriptions", str(subscriptions), "--out", str(out)),
    )
    assert "routed 2,000 messages" in printed, printed
    _check_deliveries(out, data)


def test_stream_on_a_standalone_cluster(cluster: Cluster, tmp_path: Path) -> None:
    data = generate(subscriptions=300, messages=1_000, seed=12, tenants=("default", "acme"))
    landing = tmp_path / "landing"
    landing.mkdir()
    subscriptions = _inputs(tmp_path, data, landing / "messages.parquet")
    out = tmp_path / "out"
    printed = _route(
        cluster,
        tmp_path,
        *("--available-now", "--messages", str(landing)),
        *("--subscriptions", str(subscriptions), "--out", str(out)),
    )
    assert "batch 0: 1,000 messages" in printed and "version 0" in printed, printed
    _check_deliveries(out, data)
