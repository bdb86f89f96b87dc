"""Readable reports of where an engine and a real broker disagree (conformance tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from matcher import create_matcher


def _ids(ids: Collection[int], limit: int = 20) -> str:
    shown = sorted(ids)
    text = ", ".join(map(str, shown[:limit]))
    return f"[{text}{', ...' if len(shown) > limit else ''}] ({len(shown)})"


def _with_patterns(ids: Collection[int], patterns: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(f"{i}: {patterns[i]!r}" for i in sorted(ids)[:limit])
    return f"{{{shown}{', ...' if len(ids) > limit else ''}}} ({len(ids)})"


def describe_mismatch(
    what: str, topic: str, expected: frozenset[int], got: Sequence[int], patterns: Sequence[str]
) -> str:
    """One differing topic (``what``: "key" or "topic"): what the broker and the engine
    said, and the patterns at issue."""
    actual = set(got)
    lines = [f"  {what} {topic!r}: broker {_ids(expected)}, engine {_ids(actual)}"]
    if missing := expected - actual:
        lines.append(
            f"    missing (broker delivers, engine does not): {_with_patterns(missing, patterns)}"
        )
    if extra := actual - expected:
        lines.append(
            f"    extra (engine matches, broker does not): {_with_patterns(extra, patterns)}"
        )
    if len(got) != len(actual):
        dupes = sorted(i for i, n in Counter(got).items() if n > 1)
        lines.append(f"    duplicate ids in match(): {dupes}")
    return "\n".join(lines)


def differences(
    engine: str,
    dialect: str,
    patterns: Sequence[str],
    topics: Sequence[str],
    routed: Sequence[frozenset[int]],
    what: str,
) -> list[str]:
    """Subscribe pattern i as id i on a new ``engine``; describe every topic whose matches
    differ from what the broker routed (``routed[k]`` for ``topics[k]``)."""
    matcher = create_matcher(engine, dialect=dialect)
    for sub_id, pattern in enumerate(patterns):
        matcher.subscribe(sub_id, pattern)
    differing: list[str] = []
    for topic, expected in zip(topics, routed, strict=True):
        got = list(matcher.match(topic))
        if set(got) != expected or len(got) != len(expected):
            differing.append(describe_mismatch(what, topic, expected, got, patterns))
    return differing
