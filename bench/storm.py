"""A reconnect storm, as an operator sees it: clients that reconnect re-create every
subscription they had, all at once.

A real ``topicstore serve`` on a store already holding ``count`` subscriptions (made once
by ``bench.big_store``) takes ``recreates`` re-creates of stored subscriptions through the
API from ``clients`` clients: once as single ``POST /v1/subscriptions`` calls, once as
``POST /v1/subscriptions/bulk`` requests (a gateway re-creating its clients' subscriptions
in batches). Meanwhile another process times ``POST /v1/match`` at 100/s on topics the
stored patterns match, and ``/readyz`` is probed every 100 ms; the same probers run
alone first (the machine's own noise). The change log's growth is read as the newest
change the server applied (``topicstore_applied_seq`` in ``/metrics``) before and after:
a re-create of a present subscription must add nothing for followers to apply.
"""

from __future__ import annotations

import argparse
import json
import random
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bench.big_store import big_store, stored_pairs
from bench.percentiles import percentile
from bench.report import Cell, Column, Table, format_table
from bench.write_clients import GRACE_S, PROBE_RATE, READY_EVERY_S, STORM_BULK, Clients
from bench.write_load import metric, running_replicas, server_settings
from harness.scratch_db import DEFAULT_ADMIN_URL, postgres_reachable
from harness.server import Server
from harness.workloads import topic_for

#: Re-creates in one storm and the clients sending them, as the write-path target states.
RECREATES: Final = 50_000
CLIENTS: Final = 8
#: Seconds the probers run alone before the storms.
QUIET_S: Final = 5.0
#: A match slower than this during a storm misses the target (issue 30).
SLOW_MS: Final = 50.0
#: Seconds a storm may take at most: one that takes longer is cut there, and the table
#: says how many re-creates it got through.
BUDGET_S: Final = 300.0
#: The rows of each store: the probers alone, then the two storms.
PHASES: Final = ("no storm", "single creates", f"bulk, {STORM_BULK} per request")


def _files(directory: Path, count: int, recreates: int, seed: int) -> tuple[Path, Path]:
    """The storm's items (the first ``recreates`` stored subscriptions, again from the
    first when there are fewer) and the prober's topics, as files for the clients."""
    pairs = stored_pairs(count, seed)
    items = [
        {"subscriber": subscriber, "pattern": pattern}
        for subscriber, pattern in (pairs[i % count] for i in range(recreates))
    ]
    rng = random.Random(seed)
    filler = ["r1", "v1", "s1", "buy", "e1"]
    topics = [topic_for(pattern, filler, rng) for _, pattern in rng.sample(pairs, 200)]
    items_file, topics_file = directory / "storm-items.json", directory / "storm-topics.json"
    items_file.write_text(json.dumps(items), encoding="utf-8")
    topics_file.write_text(json.dumps(topics), encoding="utf-8")
    return items_file, topics_file


def _seq(server: Server) -> float:
    return metric(server, "topicstore_applied_seq")


def _phase(
    server: Server,
    token: str,
    directory: Path,
    topics: Path,
    storm: Sequence[str],
    quiet_s: float,
) -> list[Cell]:
    """One row's figures after its label: during one storm (``storm``: the storm client's
    arguments), or the probers alone for ``quiet_s`` (``storm`` empty)."""
    # The probers stop when the storm is over, or after quiet_s without one.
    seconds = ("--seconds", str(quiet_s)) if not storm else ()
    with Clients(directory) as phase:
        probe = phase.start(
            "probe", server.url, "--token", token, "--topics", str(topics), *seconds
        )
        ready = phase.start("ready", server.url, *seconds)
        stormer = phase.start("storm", server.url, "--token", token, *storm) if storm else None
        phase.wait_ready()
        before = _seq(server)
        phase.go()
        result: dict[str, Any] = {}
        if stormer is not None:
            result = stormer.result(GRACE_S + float(storm[storm.index("--seconds") + 1]))
            probe.stop()
            ready.stop()
        matches = probe.result(quiet_s + GRACE_S)
        probes = ready.result(quiet_s + GRACE_S)
        added = _seq(server) - before
    answered = [s * 1e3 for s in matches if s is not None]
    match_cells: list[Cell] = [
        added,
        percentile(answered, 99),
        max(answered, default=float("nan")),
        sum(1 for s in answered if s > SLOW_MS),
        len(matches) - len(answered),
        f"{len(probes['failed'])} of {probes['probes']}",
    ]
    if stormer is None:
        return [None] * 6 + match_cells
    sent = result["created"] + result["exists"] + result["failed"]
    requests = [s * 1e3 for s in result["latencies"]]
    return [
        sent,
        result["seconds"],
        sent / result["seconds"],
        result["created"],
        result["failed"],
        percentile(requests, 99),
        *match_cells,
    ]


def run_storm(
    counts: Sequence[int] = (1_000_000,),
    recreates: int = RECREATES,
    seed: int = 0,
    *,
    backends: Sequence[str] = ("postgresql", "duckdb"),
    clients: int = CLIENTS,
    quiet_s: float = QUIET_S,
    budget_s: float = BUDGET_S,
    admin_url: str = DEFAULT_ADMIN_URL,
) -> Table:
    """Three rows per backend and store size: the probers alone, a storm of single
    creates, a storm of bulk requests."""
    table = Table(
        name="storm",
        title=f"A reconnect storm: {recreates:,} re-creates of stored subscriptions from "
        f"{clients} clients",
        columns=[
            Column("storm"),
            Column("subscriptions", "{:,}"),
            Column("re-creates", "{:,}"),
            Column("seconds", "{:,.1f}"),
            Column("re-creates/s", "{:,.0f}", chart=True),
            Column("created", "{:,}"),
            Column("failed", "{:,}"),
            Column("request p99 ms", "{:,.1f}"),
            Column("change-log rows", "{:,.0f}"),
            Column("match p99 ms", "{:,.1f}"),
            Column("match max ms", "{:,.1f}", chart=True),
            Column(f"matches > {SLOW_MS:g} ms", "{:,}"),
            Column("matches failed", "{:,}"),
            Column("/readyz not 200", "{}"),
        ],
        notes=[
            f"re-creates: the store's first {recreates:,} subscriptions sent again by "
            f"{clients} clients (each a thread of one process, one keep-alive connection), as "
            f"single POST /v1/subscriptions, or as POST /v1/subscriptions/bulk of {STORM_BULK} "
            f"items; created: those the server stored as new (0 expected). A storm is cut "
            f"after {budget_s:g} s.",
            "change-log rows: how far the server's newest applied change "
            "(topicstore_applied_seq) moved during the row (0 expected).",
            f"match: POST /v1/match at {PROBE_RATE:.0f}/s on topics the stored patterns match, "
            f"from another process; /readyz every {READY_EVERY_S * 1000:.0f} ms. The 'no storm' "
            f"row is the same probers alone for {quiet_s:g} s.",
            f"Targets (issue 30): 0 change-log rows, no match slower than {SLOW_MS:g} ms.",
        ],
    )
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="topicstore-storm-") as tmp:
        directory = Path(tmp)
        for backend in backends:
            if backend == "postgresql" and not postgres_reachable(admin_url):
                table.notes.append(f"PostgreSQL skipped: not reachable at {admin_url}")
                continue
            for count in counts:
                items, topics = _files(directory, count, recreates, seed)
                storm = (
                    "--items",
                    str(items),
                    "--clients",
                    str(clients),
                    "--seconds",
                    f"{budget_s}",
                )
                storms: list[Sequence[str]] = [(), storm, (*storm, "--bulk", str(STORM_BULK))]
                with (
                    big_store(backend, count, seed, directory, admin_url) as url,
                    running_replicas(directory, server_settings(url, token, count), 1) as (server,),
                ):
                    for phase, args in zip(PHASES, storms, strict=True):
                        cells = _phase(server, token, directory, topics, args, quiet_s)
                        table.rows.append([f"{backend}, {phase}", count, *cells])
                        if args and cells[0] != recreates:
                            table.notes.append(
                                f"{backend}, {phase}: cut at {budget_s:g} s, after {cells[0]:,} "
                                f"of {recreates:,} re-creates"
                            )
    return table


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--recreates", type=int, default=RECREATES)
    parser.add_argument("--backends", nargs="+", default=["postgresql", "duckdb"])
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds per storm, at most")
    args = parser.parse_args(argv)
    table = run_storm(
        args.counts,
        args.recreates,
        backends=args.backends,
        clients=args.clients,
        budget_s=args.budget,
    )
    print(format_table(table))


if __name__ == "__main__":
    main()
