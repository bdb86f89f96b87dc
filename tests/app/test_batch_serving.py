"""A big batch never stalls the server: it runs off the event loop in slices, so a real
uvicorn keeps answering ``/healthz`` while a 10,000-topic, high fan-out batch is in flight
(one such batch stalled ``/healthz`` for 3.8 s before). Relative, not timed: the probes must
be answered many times during the batch, each far faster than the batch itself."""

from __future__ import annotations

import threading
import time

import httpx

from tests.app.conftest import ADMIN_HEADERS, ServerFactory
from tests.app.test_api_server import settings_for

SUBSCRIPTIONS = 10_000
PREFIXES = 100  # each topic matches SUBSCRIPTIONS / PREFIXES = 100 subscriptions
TOPICS = 10_000


def test_healthz_answers_while_a_big_batch_runs(serve: ServerFactory, tmp_path: object) -> None:
    server = serve(**settings_for(f"duckdb:///{tmp_path}/batch.duckdb"))
    server.wait_until("/readyz", 200)
    with server.client(ADMIN_HEADERS, timeout_s=120) as client:
        items = [
            {"subscriber": f"s{i}", "pattern": f"fan.{i % PREFIXES}.#"}
            for i in range(SUBSCRIPTIONS)
        ]
        for start in range(0, SUBSCRIPTIONS, 5_000):
            stored = client.post(
                "/v1/subscriptions/bulk", json={"items": items[start : start + 5_000]}
            )
            assert stored.status_code == 200, stored.text
        topics = [f"fan.{k % PREFIXES}.x" for k in range(TOPICS)]
        done = threading.Event()
        answer: list[httpx.Response] = []

        def batch() -> None:
            answer.append(client.post("/v1/match/batch", json={"topics": topics}))
            done.set()

        started = time.perf_counter()
        worker = threading.Thread(target=batch)
        worker.start()
        probes: list[float] = []
        with httpx.Client(base_url=server.url, timeout=120) as probe:
            while not done.is_set():
                sent = time.perf_counter()
                assert probe.get("/healthz").status_code == 200
                if not done.is_set():  # answered while the batch was still in flight
                    probes.append(time.perf_counter() - sent)
                time.sleep(0.005)
        worker.join()
        took = time.perf_counter() - started
    assert answer[0].status_code == 200, answer[0].text
    results = answer[0].json()["results"]
    assert len(results) == TOPICS and all(len(r["subscriptions"]) == 100 for r in results)
    # Served all along: many probes during the batch, the slowest a small part of it.
    assert len(probes) >= 5, (len(probes), took)
    assert max(probes) < took / 3, (max(probes), took)
