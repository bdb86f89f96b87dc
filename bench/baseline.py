"""The bar the targets are set against: a plain Python dict-of-dicts trie.

Written the way most people would write it in an afternoon (nested dicts keyed by word,
recursive backtracking), so "faster than the baseline" means faster than the obvious
solution. It is deliberately not an engine: no validation, no limits, no locking, and the
backtracking over ``#`` is exponential in the number of ``#`` (as RabbitMQ's trie is).
Same method names as the engines so the same timing code runs it.

``MemoizedDictTrie`` is the same trie with the one fix an afternoon's second hour brings:
remember each (node, word position) already explored, so a match visits each at most once
(polynomial: nodes x words, times words for a ``#`` trying every stop). The adversarial
table shows both, so "the baseline times out" is not read as "dict tries time out".
"""

from __future__ import annotations

from typing import Any, Final

#: Key of a node's subscriber-id set. Never a word: AMQP words cannot contain the separator.
_IDS: Final = "."
_ONE: Final = "*"
_MANY: Final = "#"


def _words(text: str) -> list[str]:
    """AMQP words: split on every ``.``, keeping empty words, but ``""`` is zero words."""
    return text.split(".") if text else []


def _collect(node: dict[str, Any], words: list[str], i: int, out: set[int]) -> None:
    if i == len(words):
        ids = node.get(_IDS)
        if ids:
            out.update(ids)
    else:
        for key in (words[i], _ONE):
            child = node.get(key)
            if child is not None:
                _collect(child, words, i + 1, out)
    many = node.get(_MANY)
    if many is not None:
        for j in range(i, len(words) + 1):  # '#' eats zero or more words
            _collect(many, words, j, out)


def _collect_once(
    node: dict[str, Any], words: list[str], i: int, out: set[int], seen: set[tuple[int, int]]
) -> None:
    """``_collect``, skipping a (node, position) already explored in this match (nodes are
    alive for the whole match, so ``id`` names one). A copy rather than a flag on
    ``_collect``: the baseline every ratio divides by must not pay for a memo check."""
    state = (id(node), i)
    if state in seen:
        return
    seen.add(state)
    if i == len(words):
        ids = node.get(_IDS)
        if ids:
            out.update(ids)
    else:
        for key in (words[i], _ONE):
            child = node.get(key)
            if child is not None:
                _collect_once(child, words, i + 1, out, seen)
    many = node.get(_MANY)
    if many is not None:
        for j in range(i, len(words) + 1):
            _collect_once(many, words, j, out, seen)


class DictTrie:
    """Subscribe/unsubscribe O(words); match by backtracking over ``*`` and ``#`` edges."""

    def __init__(self) -> None:
        self._root: dict[str, Any] = {}
        self._patterns: dict[int, list[str]] = {}

    def subscribe(self, sub_id: int, pattern: str) -> None:
        """Add ``sub_id`` under ``pattern`` (re-subscribing an id replaces its pattern)."""
        self.unsubscribe(sub_id)
        words = _words(pattern)
        node = self._root
        for word in words:
            node = node.setdefault(word, {})
        node.setdefault(_IDS, set()).add(sub_id)
        self._patterns[sub_id] = words

    def unsubscribe(self, sub_id: int) -> bool:
        """Remove ``sub_id`` and prune the nodes left empty; False if it was not there."""
        words = self._patterns.pop(sub_id, None)
        if words is None:
            return False
        path = [self._root]
        for word in words:
            path.append(path[-1][word])
        ids = path[-1][_IDS]
        ids.discard(sub_id)
        if not ids:
            del path[-1][_IDS]
        for depth in range(len(words), 0, -1):
            if path[depth]:
                break
            del path[depth - 1][words[depth - 1]]
        return True

    def match(self, topic: str) -> set[int]:
        """Ids of every subscription whose pattern matches ``topic``."""
        out: set[int] = set()
        _collect(self._root, _words(topic), 0, out)
        return out

    def __len__(self) -> int:
        return len(self._patterns)

    def is_empty(self) -> bool:
        """True when no node is left (unsubscribe pruned everything)."""
        return not self._root


class MemoizedDictTrie(DictTrie):
    """``DictTrie`` whose match explores each (node, word position) once."""

    def match(self, topic: str) -> set[int]:
        """Ids of every subscription whose pattern matches ``topic``."""
        out: set[int] = set()
        _collect_once(self._root, _words(topic), 0, out, set())
        return out
