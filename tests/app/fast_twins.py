"""Two apps alike but for the fast path (``app.fastpath``), for the tests that hold its
answers to the routes' own: each on its own DuckDB file with the same settings, and a spy
that records, per watched request, whether FastAPI's route handler ran."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from app.fastpath import FastPath
from app.main import create_app
from tests.app.conftest import make_settings

#: What FastAPI's route handler leaves in the scope of a request it ran.
ROUTE_MARK = "fastapi_inner_astack"


@dataclass
class Spy:
    """Outermost middleware: for each request whose path ``watched`` picks, whether
    FastAPI's route handler ran."""

    app: ASGIApp
    routed: list[bool]
    watched: Callable[[str], bool]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        if scope["type"] == "http" and self.watched(scope["path"]):
            self.routed.append(ROUTE_MARK in scope)


def open_twins(
    directory: Path,
    opened: list[TestClient],
    watched: Callable[[str], bool],
    store: Callable[[TestClient], None],
    **overrides: Any,
) -> tuple[list[TestClient], list[list[bool]]]:
    """The fast app's and the reference app's clients (entered, and added to ``opened``
    for the caller to exit) and their spies' records; ``store`` fills each the same way,
    so both hold the same rows under the same ids."""
    clients: list[TestClient] = []
    spies: list[list[bool]] = []
    for fast in (True, False):
        url = f"duckdb:///{directory / f'pair{len(opened)}.duckdb'}"
        app = create_app(make_settings(url, **overrides), wait_until_ready=True, fast_path=fast)
        routed: list[bool] = []
        app.add_middleware(Spy, routed=routed, watched=watched)
        client = TestClient(app)
        client.__enter__()
        opened.append(client)
        assert isinstance(app.router.middleware_stack, FastPath) is fast
        clients.append(client)
        spies.append(routed)
        store(client)
    return clients, spies
