"""HTTP load from a separate process: ``wrk`` when it is installed (Debian's package), else a
plain Python client (``python -m bench.loadgen SPEC``). Both run closed-loop over keep-alive
connections for a fixed duration, rotate through the request bodies they are given, and
report the same figures: completed requests, failures, and the p50/p99 latency.

The Python client is the fallback that always works, not a peer of wrk: it needs more CPU
per request, which on a small box it takes from the server, so its rates are lower bounds.
"""

from __future__ import annotations

import http.client
import json
import math
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from bench.percentiles import percentile

#: wrk prints this before the JSON line its ``done`` hook writes.
WRK_MARKER: Final = "WRK_RESULT "
#: Seconds a load run may overrun its duration before it is stopped (startup, draining).
GRACE_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class Target:
    """What to send: ``method`` on ``url`` with ``headers``, cycling through ``bodies``
    (no body when the list is empty)."""

    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    bodies: list[bytes] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load run measured. ``failed`` counts non-2xx responses and socket errors."""

    client: str
    requests: int
    failed: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        """Completed requests per second."""
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def wrk_path() -> str | None:
    return shutil.which("wrk")


def run_load(
    target: Target,
    seconds: float,
    connections: int,
    workdir: Path,
    *,
    client: str = "auto",
) -> LoadResult:
    """Load ``target`` for ``seconds`` over ``connections`` keep-alive connections from a
    separate process. ``client`` is ``wrk``, ``python`` or ``auto`` (wrk when installed)."""
    wrk = wrk_path()
    if client == "auto":
        client = "wrk" if wrk else "python"
    workdir.mkdir(parents=True, exist_ok=True)
    if client == "wrk":
        if wrk is None:
            raise RuntimeError("wrk is not installed (Debian: apt-get install wrk)")
        return _run_wrk(wrk, target, seconds, connections, workdir)
    if client == "python":
        return _run_python(target, seconds, connections, workdir)
    raise ValueError(f"unknown load client {client!r}: wrk, python or auto")


# -- wrk ------------------------------------------------------------------------------


def _lua_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _wrk_script(target: Target, body_files: list[Path]) -> str:
    """A Lua script that pre-formats one request per body and rotates through them, and
    prints the summary as JSON (wrk's own text output rounds and changes units)."""
    path = urlsplit(target.url).path or "/"
    headers = ", ".join(
        f"[{_lua_string(name)}] = {_lua_string(value)}" for name, value in target.headers.items()
    )
    files = ", ".join(_lua_string(str(p)) for p in body_files)
    return f"""
local files = {{{files}}}
local headers = {{{headers}}}
local requests = {{}}
if #files == 0 then
  requests[1] = wrk.format({_lua_string(target.method)}, {_lua_string(path)}, headers, nil)
end
for i, name in ipairs(files) do
  local f = assert(io.open(name, "rb"))
  local body = f:read("*a")
  f:close()
  requests[i] = wrk.format({_lua_string(target.method)}, {_lua_string(path)}, headers, body)
end
local n = 0
request = function()
  n = n % #requests + 1
  return requests[n]
end
done = function(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    '{WRK_MARKER}{{"requests": %d, "failed": %d, "duration_us": %d, '
      .. '"p50_us": %d, "p99_us": %d}}\\n',
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout,
    summary.duration, latency:percentile(50), latency:percentile(99)))
end
"""


def _run_wrk(
    wrk: str, target: Target, seconds: float, connections: int, workdir: Path
) -> LoadResult:
    body_files = []
    for i, body in enumerate(target.bodies):
        path = workdir / f"body-{i}.json"
        path.write_bytes(body)
        body_files.append(path)
    script = workdir / "load.lua"
    script.write_text(_wrk_script(target, body_files), encoding="utf-8")
    duration = max(1, math.ceil(seconds))  # wrk takes whole seconds
    argv = [
        wrk,
        "--threads",
        "1",
        "--connections",
        str(connections),
        "--duration",
        f"{duration}s",
        "--timeout",
        "10s",
        "--script",
        str(script),
        target.url,
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=duration + GRACE_S, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(WRK_MARKER)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    raw = json.loads(lines[-1][len(WRK_MARKER) :])
    return LoadResult(
        client="wrk",
        requests=raw["requests"],
        failed=raw["failed"],
        seconds=raw["duration_us"] / 1e6,
        p50_ms=raw["p50_us"] / 1e3,
        p99_ms=raw["p99_us"] / 1e3,
    )


# -- the Python client ------------------------------------------------------------------


def _run_python(target: Target, seconds: float, connections: int, workdir: Path) -> LoadResult:
    spec = workdir / "load.json"
    spec.write_text(
        json.dumps(
            {
                "url": target.url,
                "method": target.method,
                "headers": target.headers,
                "bodies": [body.decode("utf-8") for body in target.bodies],
                "seconds": seconds,
                "connections": connections,
            }
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "bench.loadgen", str(spec)],
        capture_output=True,
        text=True,
        timeout=seconds + GRACE_S,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load client failed ({done.returncode}): {done.stderr}")
    return LoadResult(**json.loads(done.stdout.splitlines()[-1]))


def python_client(
    url: str,
    method: str,
    headers: dict[str, str],
    bodies: list[bytes],
    seconds: float,
    connections: int,
) -> LoadResult:
    """``connections`` threads, each with one keep-alive ``http.client`` connection, send
    requests back to back until ``seconds`` have passed."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    payloads: list[bytes | None] = list(bodies) or [None]
    latencies: list[list[float]] = [[] for _ in range(connections)]
    failures = [0] * connections
    deadline = time.perf_counter() + seconds

    def worker(slot: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        mine = latencies[slot]
        n = slot
        try:
            while (started := time.perf_counter()) < deadline:
                body = payloads[n % len(payloads)]
                n += 1
                try:
                    conn.request(method, path, body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    failures[slot] += 1
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=10)
                    continue
                if 200 <= response.status < 300:
                    mine.append(time.perf_counter() - started)
                else:
                    failures[slot] += 1
        finally:
            conn.close()

    began = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    merged = [latency for slot in latencies for latency in slot]
    return LoadResult(
        client=f"python ({connections} threads)",
        requests=len(merged) + sum(failures),
        failed=sum(failures),
        seconds=elapsed,
        p50_ms=percentile(merged, 50) * 1e3,
        p99_ms=percentile(merged, 99) * 1e3,
    )


def main() -> None:
    """``python -m bench.loadgen SPEC.json``: run the Python client, print its result."""
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    result = python_client(
        spec["url"],
        spec["method"],
        spec["headers"],
        [body.encode("utf-8") for body in spec["bodies"]],
        float(spec["seconds"]),
        int(spec["connections"]),
    )
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
