"""Bulk creation: the items as columns, the per-item results kept as plain columns, and
the quick checks that spare a plain item its schema object and full validation.

An import of a million lines goes through ``AdminOperations.create_many`` ten thousand
items at a time; a pydantic object, a ``validate`` call and a result object per item were
most of its cost. Most items are plain (a topic subscription in AMQP, printable ASCII,
within the limits, no group, labels or other fields): those travel as Arrow columns
(``Items``), and ``accept_plain`` proves for all of them at once, in a few vectorized string
tests, that the full path would accept each unchanged (``plain`` is the same test for one
item). Anything else (and anything the quick tests are unsure of) takes the full path,
which names every problem exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import JsonValue, ValidationError

from app.auth import Caller
from app.refusals import InvalidRequestError, ServiceError
from matcher import Limits
from store import NewSubscription
from store.records import MAX_NAME_BYTES
from store.staging import plain_rows
from topicstore.models import BulkItem, BulkOut, ErrorBody, SubscriptionIn

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


#: Characters a plain name may not hold: anything but printable ASCII, and the space (RE2).
_NOT_PLAIN_NAME: Final = "[^!-~]"
#: Characters a plain pattern or tenant may not hold: anything but printable ASCII.
_NOT_PLAIN_TEXT: Final = "[^ -~]"
_STRINGS: Final = pa.string()


@dataclass(slots=True)
class Items:
    """A bulk create's ``size`` items in two parts: those shaped like a plain item (a
    subscriber and a pattern, perhaps a tenant and the ``amqp`` dialect, all strings) as
    Arrow columns, ``at`` holding their positions; the others as JSON values with theirs.
    An import's reader builds the columns straight from its lines (no object per line);
    ``of`` splits a JSON list (the API's body). ``source``: the items as given, when there
    is such a list (a refused column item is read back from it; without it, as the reader
    would have made it: subscriber, pattern and the tenant when given)."""

    size: int
    at: pa.Array
    subscriber: pa.Array
    pattern: pa.Array
    tenant: pa.Array
    others: list[tuple[int, JsonValue]] = field(default_factory=list)
    source: Sequence[JsonValue] | None = None

    @classmethod
    def of(cls, items: Sequence[JsonValue]) -> Items:
        """``items`` split: O(items), a few dictionary look-ups each."""
        at: list[int] = []
        subscribers: list[str] = []
        patterns: list[str] = []
        tenants: list[str | None] = []
        others: list[tuple[int, JsonValue]] = []
        for index, item in enumerate(items):
            if type(item) is dict and _PLAIN_FIELDS.issuperset(item):
                subscriber = item.get("subscriber")
                pattern = item.get("pattern")
                tenant = item.get("tenant")
                if (
                    type(subscriber) is str
                    and type(pattern) is str
                    and item.get("dialect", "amqp") == "amqp"
                    and (tenant is None or type(tenant) is str)
                ):
                    at.append(index)
                    subscribers.append(subscriber)
                    patterns.append(pattern)
                    tenants.append(tenant)
                    continue
            others.append((index, item))
        try:
            subscriber, pattern, tenant = (
                pa.array(c, _STRINGS) for c in (subscribers, patterns, tenants)
            )
        except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so not for Arrow
            return cls._of_text(items, at, others)
        at_array = pa.array(at, pa.int64())
        return cls(len(items), at_array, subscriber, pattern, tenant, others, items)

    @classmethod
    def _of_text(
        cls, items: Sequence[JsonValue], at: list[int], others: list[tuple[int, JsonValue]]
    ) -> Items:
        """``of`` when a column item holds text that is not Unicode: that item joins the
        others (the full path names its problem)."""
        kept = [i for i in at if _encodable(items[i])]
        dropped = set(at).difference(kept)
        others = sorted([*others, *((i, items[i]) for i in dropped)], key=lambda o: o[0])
        rows: list[dict[str, str]] = [items[i] for i in kept]  # type: ignore[misc]
        return cls(
            len(items),
            pa.array(kept, pa.int64()),
            pa.array([r["subscriber"] for r in rows], _STRINGS),
            pa.array([r["pattern"] for r in rows], _STRINGS),
            pa.array([r.get("tenant") for r in rows], _STRINGS),
            others,
            items,
        )

    def item(self, index: int, column: int) -> JsonValue:
        """The column item at ``index`` (row ``column`` of the columns) as JSON."""
        if self.source is not None:
            return self.source[index]
        item: dict[str, JsonValue] = {
            "subscriber": self.subscriber[column].as_py(),
            "pattern": self.pattern[column].as_py(),
        }
        tenant = self.tenant[column].as_py()
        if tenant is not None:
            item["tenant"] = tenant
        return item

    def json_values(self) -> list[JsonValue]:
        """Every item as JSON, in order (what the API is sent)."""
        if self.source is not None:
            return list(self.source)
        values: list[JsonValue] = [None] * self.size
        tenants = self.tenant.to_pylist()
        columns = zip(
            self.at.to_pylist(),
            self.subscriber.to_pylist(),
            self.pattern.to_pylist(),
            tenants,
            strict=True,
        )
        for index, subscriber, pattern, tenant in columns:
            item: dict[str, JsonValue] = {"subscriber": subscriber, "pattern": pattern}
            if tenant is not None:
                item["tenant"] = tenant
            values[index] = item
        for index, other in self.others:
            values[index] = other
        return values


def _encodable(item: JsonValue) -> bool:
    assert isinstance(item, dict)
    try:
        for value in item.values():
            if isinstance(value, str):
                value.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class PlainRows:
    """The column items ``accept_plain`` accepted (positions, resolved tenants, subscribers,
    patterns: valid as they are, in AMQP), and the positions and column rows of the ones
    it did not (for the full path)."""

    at: pa.Array
    tenant: pa.Array
    subscriber: pa.Array
    pattern: pa.Array
    refused: list[tuple[int, int]]


def accept_plain(items: Items, caller: Caller, limits: Limits) -> PlainRows:
    """``plain``'s test on every column item at once (Arrow compute: O(total length), no
    Python object per item): printable ASCII (no space in the subscriber), names of 1 to
    255 bytes, the pattern within the byte and word limits and, under
    ``max_hash_wildcards``, with at most that many ``#`` characters; the tenant the
    caller's as ``tenant_for`` says (asked once per distinct tenant)."""
    tenants = pc.fill_null(items.tenant, "")
    distinct = pc.unique(tenants)
    resolved: list[str | None] = []
    for name in distinct.to_pylist():
        try:
            resolved.append(caller.tenant_for(name or None))
        except ServiceError:
            resolved.append(None)
    tenant = pc.take(pa.array(resolved, _STRINGS), pc.index_in(tenants, distinct))
    subscriber, pattern = items.subscriber, items.pattern
    names = pc.binary_length(subscriber)
    tenant_bytes = pc.binary_length(tenant)
    pattern_bytes = pc.binary_length(pattern)
    ok = pc.and_kleene(
        pc.and_(pc.greater(names, 0), pc.less_equal(names, MAX_NAME_BYTES)),
        pc.and_(pc.greater(tenant_bytes, 0), pc.less_equal(tenant_bytes, MAX_NAME_BYTES)),
    )
    ok = pc.and_kleene(ok, pc.less_equal(pattern_bytes, limits.max_pattern_bytes))
    ok = pc.and_kleene(ok, pc.invert(pc.match_substring_regex(subscriber, _NOT_PLAIN_NAME)))
    ok = pc.and_kleene(ok, pc.invert(pc.match_substring_regex(tenant, _NOT_PLAIN_TEXT)))
    ok = pc.and_kleene(ok, pc.invert(pc.match_substring_regex(pattern, _NOT_PLAIN_TEXT)))
    dots = pc.count_substring(pattern, ".")
    ok = pc.and_kleene(ok, pc.or_(pc.equal(pattern_bytes, 0), pc.less(dots, limits.max_words)))
    hashes = limits.max_hash_wildcards
    if hashes is not None:
        ok = pc.and_kleene(ok, pc.less_equal(pc.count_substring(pattern, "#"), hashes))
    ok = pc.fill_null(ok, False)  # a tenant the caller may not name
    refused = pc.indices_nonzero(pc.invert(ok)).to_pylist()
    at = items.at
    positions = pc.take(at, pa.array(refused, pa.int64())).to_pylist() if refused else []
    return PlainRows(
        pc.filter(at, ok),
        pc.filter(tenant, ok),
        pc.filter(subscriber, ok),
        pc.filter(pattern, ok),
        list(zip(positions, refused, strict=True)),
    )


@dataclass(frozen=True, slots=True)
class Valid:
    """A bulk create's valid items: the plain ones as columns (and as staged rows), the
    others as records with their positions (in order)."""

    plain: PlainRows
    records: list[tuple[int, NewSubscription]]

    @property
    def staged(self) -> pa.Table:
        """The plain items as a staged batch (``store.staging``)."""
        rows = self.plain
        return plain_rows(rows.at, rows.tenant, rows.subscriber, rows.pattern)

    @property
    def count(self) -> int:
        return len(self.plain.at) + len(self.records)


#: What a plain row is to the group check: in no group.
PLAIN: Final = NewSubscription("", "")


def topic_keys(news: Iterable[NewSubscription]) -> list[tuple[str, str, str]]:
    """(tenant, dialect, pattern) of the topic subscriptions among ``news``."""
    return [(n.tenant, n.dialect, n.pattern) for n in news if n.kind == "topic"]


def stored_keys(
    records: Sequence[tuple[int, NewSubscription]], rows: PlainRows
) -> Iterator[tuple[str, str, str, str]]:
    """The unique keys (tenant, subscriber, dialect, pattern) of a batch's records and plain
    rows; lazy, so a caller that needs none (no expired row stored) pays nothing."""
    for _, new in records:
        yield new.tenant, new.subscriber, new.dialect, new.pattern
    columns = (rows.tenant.to_pylist(), rows.subscriber.to_pylist(), rows.pattern.to_pylist())
    for tenant, subscriber, pattern in zip(*columns, strict=True):
        yield tenant, subscriber, "amqp", pattern


def room_keys(
    made: Sequence[int], news: dict[int, NewSubscription], rows: PlainRows
) -> list[tuple[str, str, str]]:
    """(tenant, dialect, pattern) of the topic subscriptions at positions ``made``: the
    records ``news`` and the plain ``rows`` (what the engines' room check is asked)."""
    wanted = set(made)
    keys = topic_keys(new for index, new in news.items() if index in wanted)
    columns = zip(
        rows.at.to_pylist(), rows.tenant.to_pylist(), rows.pattern.to_pylist(), strict=True
    )
    keys += [(tenant, "amqp", pattern) for index, tenant, pattern in columns if index in wanted]
    return keys


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


#: Schema problems that have a rule of their own (the store's code for the same rule).
_SCHEMA_CODES: Final = {"finite_number": "invalid_number"}


def parse_item(item: JsonValue) -> SubscriptionIn:
    """One bulk item as ``SubscriptionIn``, or ``InvalidRequestError`` naming its first
    problem (``invalid_number`` for NaN or an infinity, as the store names that rule)."""
    try:
        return SubscriptionIn.model_validate(item)
    except ValidationError as e:
        problem = e.errors()[0]
        where = ".".join(str(part) for part in problem.get("loc", ()))
        message = f"{where}: {problem['msg']}" if where else str(problem["msg"])
        code = _SCHEMA_CODES.get(problem["type"], InvalidRequestError.code)
        raise InvalidRequestError(message, code=code) from e
