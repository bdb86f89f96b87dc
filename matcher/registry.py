"""Engine names and the factory that builds them."""

from __future__ import annotations

from typing import Final

from matcher._native import NativeMatcher
from matcher.base import Matcher
from matcher.cache import CachedMatcher
from matcher.cs_trie import CsTrieMatcher
from matcher.dfa import DfaMatcher
from matcher.inverted_bitmap import InvertedBitmapMatcher
from matcher.limits import Limits
from matcher.naive import NaiveMatcher
from matcher.optimized_inverted_bitmap import OptimizedInvertedBitmapMatcher
from matcher.trie import TrieMatcher

_ENGINE_CLASSES: Final[dict[str, type[Matcher]]] = {
    cls.name: cls
    for cls in (
        NaiveMatcher,
        InvertedBitmapMatcher,
        OptimizedInvertedBitmapMatcher,
        TrieMatcher,
        CsTrieMatcher,
        DfaMatcher,
        NativeMatcher,
    )
}

#: Every engine name ``create_matcher`` accepts.
ENGINES: Final[tuple[str, ...]] = tuple(_ENGINE_CLASSES)


#: The engines a routing table builds unless told otherwise: the compiled walk answers, and
#: ``optimized_inverted_bitmap``, an independent algorithm, is kept current beside it and
#: checks a sample of its answers (``loader.shadow``).
DEFAULT_ENGINES: Final = ("native", "optimized_inverted_bitmap")


def create_matcher(
    name: str, dialect: str = "amqp", limits: Limits | None = None, cache_size: int = 0
) -> Matcher:
    """A new, empty engine ``name`` for ``dialect`` (``amqp``, ``mqtt`` or ``nats``);
    ``cache_size`` > 0 puts a result cache of that many topics in front of it."""
    try:
        cls = _ENGINE_CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    if cache_size < 0:
        raise ValueError("cache_size must be 0 (off) or positive")
    engine = cls(dialect=dialect, limits=limits)
    return CachedMatcher(engine, cache_size) if cache_size else engine
