"""A group's choice against its size: ``app.delivery.batch`` (the batch answer's JSON, as
the API sends it) for a 1,000-topic batch of ``hot.x``, each topic with its own key, into
one group of N members on ``hot.#``, per policy, in process; then the same batch through a
real server (``POST /v1/match/batch``) into a ``hash`` group its tenant made with bulk
requests. The engines hold one id for the group's pattern and the choice reads O(log N) of
its ring (``loader.groups``), so the time per batch should not grow with N; "counted" is
what the batch counts toward ``max_batch_matches`` per topic."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import httpx

from app.delivery import batch as answer_batch
from bench.api_load import LOAD_BATCH, serve
from bench.report import Cell, Column, Table
from loader import RoutingTable
from matcher.groups import POLICIES, Policy
from store import Change

BATCH: Final = 1_000


def _row(policy: Policy, members: int, repeats: int) -> list[Cell]:
    table = RoutingTable(("native",))
    table.apply(
        [
            Change(1, "add", i, "b", f"w{i}", "hot.#", "amqp", "topic", None, None, "g", policy)
            for i in range(1, members + 1)
        ]
    )
    topics = ["hot.x"] * BATCH
    keys = [f"k{i}" for i in range(BATCH)]
    best = float("inf")
    work = 0
    for _ in range(repeats):
        started = time.perf_counter()
        _, work = answer_batch(table, "b", "amqp", topics, keys)
        best = min(best, time.perf_counter() - started)
    return [f"{policy}, {members:,} members", best * 1e3, BATCH / best, work / BATCH]


def _served_row(members: int, repeats: int) -> list[Cell]:
    """The batch through a real server (DuckDB), the group made with bulk requests."""
    with (
        tempfile.TemporaryDirectory(prefix="topicstore-group-choice-") as tmp,
        serve(Path(tmp)) as service,
        httpx.Client(base_url=service.url, headers=service.auth, timeout=600) as http,
    ):
        for start in range(0, members, LOAD_BATCH):
            items = [
                {"subscriber": f"w{i}", "pattern": "hot.#", "group": "g", "group_policy": "hash"}
                for i in range(start, min(members, start + LOAD_BATCH))
            ]
            http.post("/v1/subscriptions/bulk", json={"items": items}).raise_for_status()
        body = {"topics": ["hot.x"] * BATCH, "keys": [f"k{i}" for i in range(BATCH)]}
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            answer = http.post("/v1/match/batch", json=body)
            best = min(best, time.perf_counter() - started)
            answer.raise_for_status()
        chosen = answer.json()["results"][0]["groups"][0]
        assert chosen["candidates"] == members, chosen
    return [f"hash, {members:,} members, HTTP", best * 1e3, BATCH / best, None]


def run_group_choice(sizes: Sequence[int], served: int, repeats: int = 5) -> Table:
    table = Table(
        name="group_choice",
        title=f"a batch of {BATCH:,} topics into one group of N members",
        columns=[
            Column("policy, group size", "{}"),
            Column("ms per batch", "{:,.1f}", chart=True),
            Column("topics/s"),
            Column("counted per topic", "{:,.0f}"),
        ],
        unit="ms",
    )
    table.rows = [_row(policy, n, repeats) for policy in POLICIES for n in sizes]
    table.rows.append(_served_row(served, repeats))
    table.notes.append(
        "counted per topic: the id answered plus the candidates the choice examined "
        "(hash: 21 probes of the ring), what max_batch_matches bounds; HTTP: the whole "
        "request through a real server (DuckDB store), the group made with bulk requests; "
        "target (issue 32): <= 100 ms for 1,000 topics into 20,000 members."
    )
    return table
