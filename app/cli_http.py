"""The command line's HTTP mode: the same admin operations through a running service."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from app.cli_backend import Item
from app.refusals import RemoteError


class HttpAdmin:
    """Works through a running service (same results, over its API)."""

    def __init__(self, base_url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=60)

    def __enter__(self) -> HttpAdmin:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.client.close()

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            error = response.json().get("error", {})
            raise RemoteError(
                response.status_code,
                error.get("code", "http_error"),
                error.get("message", response.text),
            )
        return response.json() if response.content else None

    def add_many(self, items: Sequence[Item]) -> list[Item]:
        results: list[Item] = self._json(
            self.client.post("/v1/subscriptions/bulk", json={"items": list(items)})
        )["results"]
        return results

    def remove(self, sub_id: int) -> bool:
        response = self.client.delete(f"/v1/subscriptions/{sub_id}")
        if response.status_code == 404:
            return False
        self._json(response)
        return True

    def page(self, **filters: Any) -> list[Item]:
        params = {k: v for k, v in filters.items() if v is not None}
        items: list[Item] = self._json(self.client.get("/v1/subscriptions", params=params))["items"]
        return items

    def match(self, topic: str, dialect: str, tenant: str | None) -> Item:
        body = {"topic": topic, "dialect": dialect, "tenant": tenant}
        result: Item = self._json(self.client.post("/v1/match", json=body))
        return result

    def export(self, path: Path, tenant: str | None) -> int:
        response = self.client.get(
            "/v1/subscriptions-export", params={"tenant": tenant} if tenant else {}
        )
        if response.status_code >= 400:
            self._json(response)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(response.content)
        return int(response.headers.get("x-row-count", "0"))
