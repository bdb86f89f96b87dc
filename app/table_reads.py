"""Reads answered from the routing table: explain a match, patterns overlapping or covered
by a pattern (and the listing that chooses between that search and the store's plain page),
a subscriber's redundant patterns. Implemented once; the HTTP routes and the command line's
direct mode (on a table it builds) both call these.

Bounds (also in docs/explain.md): explain details at most ``MAX_EXPLAINED`` matched subscriptions
and ``MAX_NAMED`` named subscribers; a redundancy check takes at most
``MAX_REDUNDANCY_PATTERNS`` patterns; overlap listings are keyset pages of at most 1,000.
Each takes a ``Budget`` (``app.work``) whose steps its loops spend, and stops where it runs
out or is stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from app.admin_reads import label_pair
from app.auth import Caller
from app.operations import AdminOperations
from app.refusals import InvalidDialectError, InvalidRequestError, TooManyPatternsError
from matcher import DEFAULT_LIMITS, DIALECTS, get_dialect
from matcher.budget import Budget
from matcher.explain import Explanation, explain
from matcher.overlap import Relation, redundant
from topicstore.models import (
    CaptureOut,
    Closest,
    ExplainedMatch,
    ExplainOut,
    FailureOut,
    Page,
    RedundantItem,
    RedundantOut,
    SubscriptionOrder,
    Unmatched,
)

if TYPE_CHECKING:  # the listing of a command that builds no table loads no loader
    from loader import RoutingTable

#: Matched subscriptions explained per request (lowest ids first; the total is reported).
MAX_EXPLAINED: Final = 1_000
#: Subscribers a request may name to learn why they did not match.
MAX_NAMED: Final = 20
#: A named subscriber's patterns tried for the closest one (lowest ids first).
MAX_TRIED: Final = 10_000
#: Patterns of one subscriber in one dialect a redundancy check accepts.
MAX_REDUNDANCY_PATTERNS: Final = 10_000

TOPIC_DIALECTS: Final = tuple(DIALECTS)


def _topic_dialect(dialect: str) -> str:
    if dialect not in TOPIC_DIALECTS:
        raise InvalidDialectError(
            f"unknown topic dialect {dialect!r}; known: {', '.join(TOPIC_DIALECTS)}"
        )
    return dialect


def explain_topic(
    table: RoutingTable,
    tenant: str,
    dialect: str,
    topic: str,
    subscribers: Sequence[str] = (),
    budget: Budget | None = None,
) -> ExplainOut:
    """Which of ``tenant``'s subscriptions match ``topic`` and what each wildcard took; for
    each of ``subscribers`` that none of its subscriptions match, its closest pattern and
    the first word where that failed. Cost: the match, then O(tokens x words) per pattern
    explained, spent from ``budget`` (``matcher.explain.explain``)."""
    _topic_dialect(dialect)
    named = list(dict.fromkeys(subscribers))
    if len(named) > MAX_NAMED:
        raise InvalidRequestError(
            f"name at most {MAX_NAMED} subscribers (got {len(named)})", code="too_many_subscribers"
        )
    limits = table.limits or DEFAULT_LIMITS
    grammar = get_dialect(dialect)
    ids = sorted(table.match(tenant, dialect, topic))  # validates the topic
    shown = ids[:MAX_EXPLAINED]
    matched: list[ExplainedMatch] = []
    words: tuple[str, ...] = tuple(grammar.split_topic(topic, limits))
    if grammar.mqtt_dollar_rule:
        words = words[1:]
    for sub_id, entry in table.entries(shown).items():
        e = explain(entry.pattern, topic, grammar, limits, budget)
        if not e.matched:  # removed and re-added differently meanwhile: not this match
            continue
        captures = [
            CaptureOut(token=c.token, wildcard=c.wildcard, start=c.start, words=list(c.words))
            for c in e.captures
        ]
        matched.append(
            ExplainedMatch(
                id=sub_id, subscriber=entry.subscriber, pattern=entry.pattern, captures=captures
            )
        )
    receiving = set(table.subscribers(ids))
    missing = [name for name in named if name not in receiving]
    patterns = table.patterns_of(tenant, dialect, missing) if missing else {}
    unmatched = [_closest(table, dialect, topic, name, patterns[name], budget) for name in missing]
    return ExplainOut(
        words=list(words),
        matched_total=len(ids),
        truncated=len(ids) > len(shown),
        matched=matched,
        unmatched=unmatched,
    )


def _closest(
    table: RoutingTable,
    dialect: str,
    topic: str,
    name: str,
    patterns: dict[int, str],
    budget: Budget | None,
) -> Unmatched:
    """The subscriber's pattern that gets furthest into the topic: most words matched, then
    the lowest id."""
    grammar = get_dialect(dialect)
    limits = table.limits or DEFAULT_LIMITS
    best: tuple[int, int, str, Explanation] | None = None
    for sub_id in sorted(patterns)[:MAX_TRIED]:
        e = explain(patterns[sub_id], topic, grammar, limits, budget)
        if e.failure is None:
            continue  # matches now (added after the match was taken)
        if best is None or e.failure.position > best[0]:
            best = (e.failure.position, sub_id, patterns[sub_id], e)
    closest = None
    if best is not None:
        _, sub_id, pattern, e = best
        assert e.failure is not None
        failure = FailureOut(
            position=e.failure.position,
            reason=e.failure.reason,
            expected=list(e.failure.expected),
        )
        closest = Closest(id=sub_id, pattern=pattern, failure=failure)
    return Unmatched(subscriber=name, patterns=len(patterns), closest=closest)


def subscription_page(
    table: Callable[[], RoutingTable],
    admin: AdminOperations,
    caller: Caller,
    *,
    overlaps: str | None = None,
    covered_by: str | None = None,
    label: str | None = None,
    tenant: str | None = None,
    subscriber: str | None = None,
    pattern_prefix: str | None = None,
    dialect: str | None = None,
    group: str | None = None,
    after: int | None = None,
    limit: int = 100,
    budget: Budget | None = None,
    sort: SubscriptionOrder = "id",
    after_matches: int | None = None,
    unmatched_since: datetime | None = None,
) -> Page:
    """A listing's page, as ``GET /v1/subscriptions`` and ``sub ls`` ask for it: with
    ``overlaps`` or ``covered_by`` the routing table's search (``related_page``, spending
    ``budget``; ``table`` is called only then; id order only), else the store's plain
    keyset page (by id, or most matched first). ``label`` is ``KEY=VALUE`` (the value
    compared as text)."""
    filters: dict[str, Any] = {
        "tenant": tenant,
        "subscriber": subscriber,
        "pattern_prefix": pattern_prefix,
        "dialect": dialect,
        "group": group,
        "label": None if label is None else label_pair(label),
        "after": after,
        "limit": limit,
        "unmatched_since": unmatched_since,
    }
    search = _relation_of(overlaps, covered_by)
    if search is None:
        return admin.page(caller, sort=sort, after_matches=after_matches, **filters)
    if sort != "id" or after_matches is not None:
        raise InvalidRequestError(
            "an overlaps or covered_by search lists in id order: no sort=matches",
            code="conflicting_filters",
        )
    relation, pattern = search
    return related_page(
        table(), admin, caller, relation=relation, pattern=pattern, budget=budget, **filters
    )


def _relation_of(overlaps: str | None, covered_by: str | None) -> tuple[Relation, str] | None:
    """Which search a listing asks for, if any: (relation, pattern); both is refused."""
    if overlaps is not None and covered_by is not None:
        raise InvalidRequestError(
            "give overlaps or covered_by, not both", code="conflicting_filters"
        )
    if overlaps is not None:
        return "overlaps", overlaps
    if covered_by is not None:
        return "covered_by", covered_by
    return None


def related_page(
    table: RoutingTable,
    admin: AdminOperations,
    caller: Caller,
    *,
    relation: Relation,
    pattern: str,
    dialect: str | None,
    tenant: str | None,
    subscriber: str | None = None,
    pattern_prefix: str | None = None,
    group: str | None = None,
    label: tuple[str, str] | None = None,
    after: int | None = None,
    limit: int = 100,
    budget: Budget | None = None,
    unmatched_since: datetime | None = None,
) -> Page:
    """A keyset page of the tenant's subscriptions overlapping ``pattern`` or covered by it
    (``dialect``, default amqp): the ids come from the routing table (pruned search, exact
    decision, at most ``matcher.overlap.MAX_DECISIONS`` per page and the steps of
    ``budget``), the rows from the store. Other filters apply within the page, and a page
    ends early when its decisions or steps run out, so it may hold fewer than ``limit``
    rows: continue while ``next_after`` is not null."""
    dialect = _topic_dialect(dialect or "amqp")
    tenant = caller.tenant_for(tenant)
    ids, resume = table.related(tenant, dialect, pattern, relation, after, limit, budget)
    if not ids:
        return Page(items=[], next_after=resume)
    page = admin.page(
        caller,
        tenant=tenant,
        subscriber=subscriber,
        pattern_prefix=pattern_prefix,
        group=group,
        label=label,
        dialect=dialect,
        ids=ids,
        limit=limit,
        unmatched_since=unmatched_since,
    )
    return Page(items=page.items, next_after=resume)


def redundant_patterns(
    table: RoutingTable,
    tenant: str,
    subscriber: str,
    dialect: str,
    budget: Budget | None = None,
) -> RedundantOut:
    """The subscriber's patterns in ``dialect`` that another of its patterns covers (of
    equivalent ones, all but the lowest id). At most ``MAX_REDUNDANCY_PATTERNS``, and the
    steps of ``budget`` (``matcher.overlap.redundant``)."""
    _topic_dialect(dialect)
    patterns = table.patterns_of(tenant, dialect, [subscriber])[subscriber]
    if len(patterns) > MAX_REDUNDANCY_PATTERNS:
        raise TooManyPatternsError(
            f"{subscriber!r} has {len(patterns)} {dialect} patterns; a redundancy check "
            f"takes at most {MAX_REDUNDANCY_PATTERNS}"
        )
    covered = redundant(get_dialect(dialect), sorted(patterns.items()), table.limits, budget)
    items = [
        RedundantItem(
            id=sub_id,
            pattern=patterns[sub_id],
            covered_by=other,
            covered_by_pattern=patterns[other],
        )
        for sub_id, other in sorted(covered.items())
    ]
    return RedundantOut(
        tenant=tenant,
        subscriber=subscriber,
        dialect=dialect,
        patterns=len(patterns),
        redundant=items,
    )
