"""Bulk creation: the per-item results kept as plain columns, and the quick check that
spares a plain item its schema object and full validation.

An import of a million lines goes through ``AdminOperations.create_many`` ten thousand
items at a time; a pydantic object, a ``validate`` call and a result object per item were
most of its cost. Most items are plain (a topic subscription in AMQP, printable ASCII,
within the limits, no group, labels or other fields): for those, ``plain`` proves in a
few string tests that the full path would accept the item unchanged, and builds its record
directly. Anything else (and anything the quick test is unsure of) takes the full path,
which names every problem exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

import orjson
from pydantic import JsonValue

from app.auth import Caller
from app.refusals import ServiceError
from matcher import Limits
from store import NewSubscription
from store.records import MAX_NAME_BYTES
from topicstore.models import BulkItem, BulkOut, ErrorBody

Status = Literal["created", "exists", "error"]
#: The fields a plain item may carry (the others need the full path).
_PLAIN_FIELDS: Final = frozenset(("subscriber", "pattern", "dialect", "tenant"))


def plain(item: JsonValue, caller: Caller, limits: Limits) -> NewSubscription | None:
    """The validated record of ``item`` if it is plain, else None (not an error: the full
    path decides). Plain: only subscriber, pattern and optionally dialect ``amqp`` and
    tenant, all strings of printable ASCII (no tab, no control character, so none of the
    text rules can refuse them; no space in the subscriber, which the names' rule refuses
    and a tenant may hold); names of 1 to 255 bytes, a pattern within the byte and word
    limits and, under ``max_hash_wildcards``, with at most that many ``#`` characters.
    AMQP takes every word as it is, so such a pattern is valid."""
    if type(item) is not dict or not _PLAIN_FIELDS.issuperset(item):
        return None
    subscriber = item.get("subscriber")
    pattern = item.get("pattern")
    dialect = item.get("dialect", "amqp")
    tenant = item.get("tenant")
    if type(subscriber) is not str or type(pattern) is not str or dialect != "amqp":
        return None
    if tenant is not None and type(tenant) is not str:
        return None
    try:
        tenant = caller.tenant_for(tenant)
    except ServiceError:
        return None
    for name in (subscriber, tenant):
        if not (0 < len(name) <= MAX_NAME_BYTES and name.isascii() and name.isprintable()):
            return None
    if " " in subscriber:  # the one printable ASCII character the names' rule refuses
        return None
    if len(pattern) > limits.max_pattern_bytes or not (pattern.isascii() and pattern.isprintable()):
        return None
    if pattern and pattern.count(".") >= limits.max_words:
        return None
    hashes = limits.max_hash_wildcards
    if hashes is not None and pattern.count("#") > hashes:
        return None  # perhaps over the limit: whole words count, the full path decides
    return NewSubscription(subscriber, pattern, tenant)


@dataclass(slots=True)
class BulkResult:
    """One result per item of a bulk create, as columns: its status, its id (created or
    exists), its error (failed). A create that did not ask for each item's result (an
    import) leaves the stored items' status None and keeps only their counts."""

    statuses: list[Status | None]
    ids: list[int | None]
    errors: dict[int, ErrorBody] = field(default_factory=dict)
    #: Created and already-present items counted without a status of their own.
    counted: tuple[int, int] = (0, 0)

    @classmethod
    def of(cls, size: int) -> BulkResult:
        return cls([None] * size, [None] * size)

    def fail(self, index: int, code: str, message: str) -> None:
        self.statuses[index] = "error"
        self.ids[index] = None
        self.errors[index] = ErrorBody(code=code, message=message)

    def store(self, index: int, sub_id: int, created: bool) -> None:
        self.statuses[index] = "created" if created else "exists"
        self.ids[index] = sub_id
        self.errors.pop(index, None)  # a group run again alone may set it anew

    def count(self, created: int, exists: int) -> None:
        """The stored items' outcome as counts (a group run again alone sets it anew)."""
        self.counted = (created, exists)

    @property
    def created(self) -> int:
        return self.statuses.count("created") + self.counted[0]

    @property
    def exists(self) -> int:
        return self.statuses.count("exists") + self.counted[1]

    @property
    def failed(self) -> int:
        return len(self.errors)

    def out(self) -> BulkOut:
        """The API's answer (``POST /v1/subscriptions/bulk``)."""
        return BulkOut.model_construct(
            created=self.created,
            exists=self.exists,
            failed=self.failed,
            results=[
                BulkItem.model_construct(
                    index=i, status=status or "error", id=sub_id, error=self.errors.get(i)
                )
                for i, (status, sub_id) in enumerate(zip(self.statuses, self.ids, strict=True))
            ],
        )

    def json(self) -> bytes:
        """``out()`` as JSON, written without a model object per item (the same bytes the
        response model gives: ``tests/app/test_bulk.py``)."""
        errors = self.errors
        return orjson.dumps(
            {
                "created": self.created,
                "exists": self.exists,
                "failed": self.failed,
                "results": [
                    {
                        "index": i,
                        "status": status,
                        "id": sub_id,
                        "error": errors[i].model_dump() if i in errors else None,
                    }
                    for i, (status, sub_id) in enumerate(zip(self.statuses, self.ids, strict=True))
                ],
            }
        )
