"""The ``native`` engine's test hook for its fixed capacities, for tests outside
``tests/matcher`` (which reach the capacities with a few patterns): only the matcher and
its own tests import ``matcher._native``."""

from __future__ import annotations

from matcher import Matcher
from matcher._native import NativeMatcher

#: A capacity left as good as unbounded.
UNBOUNDED = 1 << 40


def lower_capacity(
    engine: Matcher, nodes: int, tail_words: int = UNBOUNDED, text_bytes: int = UNBOUNDED
) -> None:
    """Lower ``engine``'s fixed capacities (it must be ``native``): trie nodes, tail words
    and text bytes."""
    assert isinstance(engine, NativeMatcher), engine
    engine._lower_capacity(nodes, tail_words, text_bytes)
