"""The command line's HTTP mode: the same admin operations through a running service.

A 429 (over the tenant's rate) is waited out: the request is sent again after the
``Retry-After`` seconds, so a long ``sub import`` slows down instead of failing (nothing
was stored by the refused request: the rate is checked before the route runs)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import quote

import httpx

from app.cli.protocol import Added, Item
from app.refusals import RemoteError

log = logging.getLogger(__name__)

#: Attempts of one request that all got a 429, after which it gives up (the service is
#: refusing, not pacing).
MAX_RATE_LIMITED: Final = 30
#: The longest wait a Retry-After may ask for; a longer (or unreadable) one is cut to this.
MAX_WAIT_S: Final = 60


class HttpAdmin:
    """Works through a running service (same results, over its API). ``sleep`` waits out
    a 429 (tests may pass their own)."""

    def __init__(
        self, base_url: str, token: str | None, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=60)
        self.sleep = sleep

    def __enter__(self) -> HttpAdmin:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.client.close()

    def _send(self, method: str, url: str, **options: Any) -> httpx.Response:
        """The response to a request, sent again after each 429's ``Retry-After`` (at most
        ``MAX_RATE_LIMITED`` attempts: the last 429 is then the answer)."""
        for attempt in range(1, MAX_RATE_LIMITED + 1):
            response = self.client.request(method, url, **options)
            if response.status_code != 429 or attempt == MAX_RATE_LIMITED:
                break
            wait = _retry_after(response.headers.get("retry-after"))
            log.info("rate limited by the service: waiting %s s", wait)
            self.sleep(wait)
        return response

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            error = response.json().get("error", {})
            raise RemoteError(
                response.status_code,
                error.get("code", "http_error"),
                error.get("message", response.text),
            )
        return response.json() if response.content else None

    def add(self, item: Item) -> Item:
        given = {name: value for name, value in item.items() if value is not None}
        response = self._send("POST", "/v1/subscriptions", json=given)
        stored: Item = self._json(response)
        return {"status": "created" if response.status_code == 201 else "exists", **stored}

    def prepare_import(self, items: Sequence[Item]) -> Callable[[], Added]:
        """Encodes the request now (while the one before is in flight); the call sends it."""
        body = json.dumps({"items": list(items)}, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}

        def send() -> Added:
            answer = self._json(
                self._send("POST", "/v1/subscriptions/bulk", content=body, headers=headers)
            )
            errors = [
                (r["index"], r["error"]["code"], r["error"]["message"])
                for r in answer["results"]
                if r["status"] == "error"
            ]
            return Added(answer["created"], answer["exists"], errors)

        return send

    def remove(self, sub_id: int) -> bool:
        response = self._send("DELETE", f"/v1/subscriptions/{sub_id}")
        if response.status_code == 404:
            return False
        self._json(response)
        return True

    def page(self, **filters: Any) -> list[Item]:
        params = {k: v for k, v in filters.items() if v is not None}
        items: list[Item] = self._json(self._send("GET", "/v1/subscriptions", params=params))[
            "items"
        ]
        return items

    def match(self, topic: str, dialect: str, tenant: str | None, key: str | None = None) -> Item:
        body = {"topic": topic, "dialect": dialect, "tenant": tenant, "key": key}
        result: Item = self._json(self._send("POST", "/v1/match", json=body))
        return result

    def explain(
        self, topic: str, dialect: str, tenant: str | None, subscribers: Sequence[str]
    ) -> Item:
        params: dict[str, Any] = {
            "topic": topic,
            "dialect": dialect,
            "subscriber": list(subscribers),
        }
        if tenant is not None:
            params["tenant"] = tenant
        result: Item = self._json(self.client.get("/v1/match/explain", params=params))
        return result

    def redundant(self, subscriber: str, dialect: str, tenant: str | None) -> Item:
        params = {"dialect": dialect, **({"tenant": tenant} if tenant is not None else {})}
        path = f"/v1/subscribers/{quote(subscriber, safe='')}/redundant"
        result: Item = self._json(self.client.get(path, params=params))
        return result

    def export(self, path: Path, tenant: str | None) -> int:
        response = self._send(
            "GET", "/v1/subscriptions-export", params={"tenant": tenant} if tenant else {}
        )
        if response.status_code >= 400:
            self._json(response)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(response.content)
        return int(response.headers.get("x-row-count", "0"))

    def audit(self, **filters: Any) -> list[Item]:
        names = {"since": "from", "until": "to"}
        params = {
            names.get(k, k): v.isoformat() if isinstance(v, datetime) else v
            for k, v in filters.items()
            if v is not None
        }
        items: list[Item] = self._json(self._send("GET", "/v1/audit", params=params))["items"]
        return items


def _retry_after(value: str | None) -> int:
    """Seconds a 429 asks to wait: its Retry-After (whole seconds), within 1 and
    ``MAX_WAIT_S``."""
    try:
        seconds = int(value or "1")
    except ValueError:
        seconds = MAX_WAIT_S
    return min(max(seconds, 1), MAX_WAIT_S)
