"""Admin operations for the command line, two ways: straight on the store, or through a
running service's API. DuckDB lets one process own the file, so while the server runs the
CLI must go through it; when nothing holds the file, the CLI opens the store itself."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx

from app.errors import ApiError
from app.settings import Settings
from matcher import MatcherError
from store import (
    Database,
    DatabaseLockedError,
    NewSubscription,
    StoreError,
    SubscriptionRepository,
    validate,
)
from store.export import export_parquet

Item = dict[str, Any]


class Admin(Protocol):
    """What the CLI does, whichever way it reaches the store."""

    def add_many(self, items: Sequence[Item]) -> list[Item]: ...
    def remove(self, sub_id: int) -> bool: ...
    def list(self, **filters: Any) -> list[Item]: ...
    def match(self, topic: str, dialect: str, tenant: str | None) -> Item: ...
    def export(self, path: Path, tenant: str | None) -> int: ...


def _subscription(item: Item) -> NewSubscription:
    criteria = item.get("criteria")
    return NewSubscription(
        subscriber=item.get("subscriber", ""),
        pattern=item.get("pattern", ""),
        tenant=item.get("tenant") or "default",
        dialect=item.get("dialect", "amqp"),
        kind=item.get("kind", "topic"),
        criteria=None if criteria is None else tuple(dict(criteria).items()),
        mode=item.get("mode"),
        labels=item.get("labels"),
    )


class DirectAdmin:
    """Works on the store itself (nothing else may hold a DuckDB file meanwhile)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_many(self, items: Sequence[Item]) -> list[Item]:
        results: list[Item] = []
        valid: list[tuple[int, NewSubscription]] = []
        for index, item in enumerate(items):
            try:
                valid.append((index, validate(_subscription(item))))
            except (MatcherError, StoreError) as e:
                error = {"code": e.code, "message": e.message}
                results.append({"index": index, "status": "error", "error": error})
        if valid:
            with self.db.write() as session:
                stored = SubscriptionRepository(session).add_many([new for _, new in valid])
            for (index, _), (sub_id, created) in zip(valid, stored, strict=True):
                results.append(
                    {"index": index, "status": "created" if created else "exists", "id": sub_id}
                )
        return sorted(results, key=lambda r: int(r["index"]))

    def remove(self, sub_id: int) -> bool:
        with self.db.write() as session:
            return SubscriptionRepository(session).remove(sub_id)

    def list(self, **filters: Any) -> list[Item]:
        with self.db.read() as session:
            rows = SubscriptionRepository(session).list(**filters)
        return [
            {
                "id": r.id,
                "tenant": r.tenant,
                "subscriber": r.subscriber,
                "dialect": r.dialect,
                "pattern": r.pattern,
            }
            for r in rows
        ]

    def match(self, topic: str, dialect: str, tenant: str | None) -> Item:
        from loader import Loader  # builds the whole table: fine for a one-off command

        loader = Loader(self.db)
        table = loader.build()
        ids = table.match(tenant or "default", dialect, topic)
        return {"subscriptions": sorted(ids), "subscribers": table.subscribers(ids)}

    def export(self, path: Path, tenant: str | None) -> int:
        return export_parquet(self.db, path, tenant=tenant)


class HttpAdmin:
    """Works through a running service (same results, over its API)."""

    def __init__(self, base_url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=60)

    def _json(self, response: httpx.Response) -> Any:
        if response.status_code >= 400:
            error = response.json().get("error", {})
            raise ApiError(
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

    def list(self, **filters: Any) -> list[Item]:
        params = {
            ("after" if k == "after_id" else k): v for k, v in filters.items() if v is not None
        }
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


@contextmanager
def connect(settings: Settings, api_url: str | None = None) -> Iterator[Admin]:
    """The store directly when nothing else holds it; otherwise the running service (at
    ``api_url``, or the configured host and port)."""
    if api_url is None:
        try:
            db = Database(settings.database_url)
        except DatabaseLockedError:
            api_url = f"http://{settings.host}:{settings.port}"
        else:
            try:
                db.migrate()
                yield DirectAdmin(db)
            finally:
                db.dispose()
            return
    from app.main import dev_token

    yield HttpAdmin(api_url, settings.admin_token or dev_token(settings))
