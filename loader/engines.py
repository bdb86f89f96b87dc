"""The one way the routing table makes its matchers: a (tenant, dialect)'s engine set, a
tenant's headers matcher, and the empty matchers that validate input for a tenant with
none; and the one way to subscribe an id in every engine of a set or in none."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from matcher import CapacityError, HeadersMatcher, Limits, Matcher, create_matcher
from store.records import headers_from_pattern

#: A (tenant, dialect) holding more subscriptions than this keeps only the answering engine:
#: the others exist only for the shadow check, and at a million subscriptions they would
#: double the table's memory and build time (see docs/architecture.md, "Shadow checks").
SHADOW_MAX: Final = 100_000


def engine_set(
    engines: Sequence[str],
    dialect: str,
    limits: Limits | None,
    cache_size: int,
    size: int,
    shadow_max: int,
) -> dict[str, Matcher]:
    """Empty matchers of ``engines`` for ``dialect``, the first answering: all of them for a
    group of up to ``shadow_max`` subscriptions (``size``), else the first alone."""
    chosen = engines if size <= shadow_max else engines[:1]
    return {name: create_matcher(name, dialect, limits, cache_size) for name in chosen}


def headers_matcher(items: Iterable[tuple[int, str]] = ()) -> HeadersMatcher:
    """A tenant's headers matcher holding ``items`` (id, stored pattern text)."""
    headers = HeadersMatcher()
    add_headers(headers, items)
    return headers


def add_headers(headers: HeadersMatcher, items: Iterable[tuple[int, str]]) -> None:
    """Subscribe ``items`` (id, stored pattern text, ``store.records.headers_from_pattern``)."""
    for sub_id, text in items:
        criteria, mode = headers_from_pattern(text)
        headers.subscribe(sub_id, criteria, mode)  # type: ignore[arg-type]


def subscribe_everywhere(engines: list[Matcher], sub_id: int, pattern: str, held: int = 0) -> None:
    """Subscribe ``sub_id`` in ``engines[held:]`` (``engines[:held]`` hold it already):
    in every engine or, when one raises CapacityError (re-raised), in none."""
    done = held
    try:
        for matcher in engines[held:]:
            matcher.subscribe(sub_id, pattern)
            done += 1
    except CapacityError:
        for matcher in engines[:done]:
            matcher.unsubscribe(sub_id)
        raise


_VALIDATORS: dict[tuple[str, Limits | None], Matcher] = {}
#: An empty headers matcher: validates the headers of a match for a tenant with none.
HEADERS_VALIDATOR: Final = headers_matcher()


def validator(dialect: str, limits: Limits | None) -> Matcher:
    """An empty matcher, so that a topic for a tenant with no subscriptions is still
    validated exactly like any other (bad input is refused, whoever sends it)."""
    key = (dialect, limits)
    matcher = _VALIDATORS.get(key)
    if matcher is None:
        matcher = _VALIDATORS[key] = create_matcher("naive", dialect, limits)
    return matcher
