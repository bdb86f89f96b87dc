"""The command line's HTTP mode: the same admin operations through a running service, on
the Python client (``topicstore.client``), answering in the API's JSON shapes as the
direct mode does.

A 429 (over the tenant's rate) is waited out: the request is sent again after the
``Retry-After`` seconds, so a long ``sub import`` slows down instead of failing (nothing
was stored by the refused request: the rate is checked before the route runs). A 503 is
reported at once (exit status 3): a command should not hang while the store is away."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, cast

import httpx

from app.cli.protocol import Added, Item

if TYPE_CHECKING:
    from app.bulk import Items
from topicstore.client import Client, NotFoundError, Retry, calls
from topicstore.models import Dialect, SubscriptionOut

#: Up to 30 requests for one call while each gets a 429 (after which the service is
#: refusing, not pacing), each waiting at most a minute (a longer Retry-After is reported).
RETRY: Final = Retry(attempts=30, max_wait=60, statuses=frozenset({429}))


class HttpAdmin:
    """Works through a running service (same results, over its API). ``sleep`` waits out
    a 429 (tests may pass their own)."""

    def __init__(
        self, base_url: str, token: str | None, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.client = Client(base_url, token, timeout=60, retry=RETRY, sleep=sleep)

    def __enter__(self) -> HttpAdmin:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.client.close()

    def add(self, item: Item) -> Item:
        given = {name: value for name, value in item.items() if value is not None}
        body = json.dumps(given, separators=(",", ":")).encode()

        def read(response: httpx.Response) -> Item:
            stored = SubscriptionOut.model_validate_json(response.content)
            status = "created" if response.status_code == 201 else "exists"
            return {"status": status, **stored.model_dump(mode="json")}

        return self.client.send(calls.Call("POST", "/v1/subscriptions", read, body=body))

    def prepare_import(self, items: Items) -> Callable[[], Added]:
        """Encodes the request now (while the one before is in flight); the call sends it."""
        call = calls.create_subscriptions(cast(list[Item], items.json_values()))

        def send() -> Added:
            answer = self.client.send(call)
            errors = [
                (r.index, r.error.code, r.error.message)
                for r in answer.results
                if r.status == "error" and r.error is not None
            ]
            return Added(answer.created, answer.exists, errors)

        return send

    def set_expiry(self, sub_id: int, expires_at: str | None, ttl: int | None) -> Item | None:
        body = json.dumps({"ttl": ttl} if ttl is not None else {"expires_at": expires_at}).encode()
        path = f"/v1/subscriptions/{sub_id}"
        try:
            stored = self.client.send(calls.Call("PATCH", path, _subscription, body=body))
        except NotFoundError:
            return None
        return stored.model_dump(mode="json")

    def remove(self, sub_id: int) -> bool:
        try:
            self.client.delete_subscription(sub_id)
        except NotFoundError:
            return False
        return True

    def remove_selection(self, **filters: str | None) -> Item:
        deleted = self.client.delete_subscriptions(**cast(calls.SelectionFilters, filters))
        return deleted.model_dump(mode="json")

    def get(self, sub_id: int) -> Item | None:
        try:
            return self.client.get_subscription(sub_id).model_dump(mode="json")
        except NotFoundError:
            return None

    def page(self, **filters: Any) -> list[Item]:
        page = self.client.list_subscriptions(**filters)
        return [row.model_dump(mode="json") for row in page.items]

    def match(self, topic: str, dialect: str, tenant: str | None, key: str | None = None) -> Item:
        matched = self.client.match(topic, dialect=_dialect(dialect), tenant=tenant, key=key)
        return matched.model_dump(mode="json")

    def explain(
        self, topic: str, dialect: str, tenant: str | None, subscribers: Sequence[str]
    ) -> Item:
        explained = self.client.explain(
            topic, dialect=_dialect(dialect), tenant=tenant, subscribers=subscribers
        )
        return explained.model_dump(mode="json")

    def redundant(self, subscriber: str, dialect: str, tenant: str | None) -> Item:
        found = self.client.redundant(subscriber, dialect=_dialect(dialect), tenant=tenant)
        return found.model_dump(mode="json")

    def export(self, path: Path, tenant: str | None) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.client.export_subscriptions(path, tenant)

    def audit(self, **filters: Any) -> list[Item]:
        page = self.client.audit_page(**filters)
        return [row.model_dump(mode="json") for row in page.items]


def _subscription(response: httpx.Response) -> SubscriptionOut:
    return SubscriptionOut.model_validate_json(response.content)


def _dialect(name: str) -> Dialect:
    """A ``--dialect`` the command has checked already (``options.check_dialect``)."""
    return cast(Dialect, name)
