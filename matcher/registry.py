"""Engine names and the factory that builds them."""

from __future__ import annotations

from typing import Final

from matcher.base import Matcher
from matcher.inverted_bitmap import InvertedBitmapMatcher
from matcher.limits import Limits
from matcher.naive import NaiveMatcher
from matcher.optimized_inverted_bitmap import OptimizedInvertedBitmapMatcher
from matcher.trie import TrieMatcher

_ENGINE_CLASSES: Final[dict[str, type[Matcher]]] = {
    cls.name: cls
    for cls in (NaiveMatcher, InvertedBitmapMatcher, OptimizedInvertedBitmapMatcher, TrieMatcher)
}

#: Every engine name ``create_matcher`` accepts.
ENGINES: Final[tuple[str, ...]] = tuple(_ENGINE_CLASSES)


def create_matcher(name: str, dialect: str = "amqp", limits: Limits | None = None) -> Matcher:
    """A new, empty engine ``name`` for ``dialect`` (``amqp``, ``mqtt`` or ``nats``)."""
    try:
        cls = _ENGINE_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return cls(dialect=dialect, limits=limits)
