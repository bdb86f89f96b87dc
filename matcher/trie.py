"""``trie``: a word trie with ``*`` and ``#`` edges, walked breadth-first over the topic.

The walk keeps, for each topic position, the set of trie nodes reachable there (an NFA
simulation, as in seed 003's DFA without the caching). A node enters a level at most once,
so a match costs at most ``nodes x (words + 1)`` steps whatever the ``#`` count; RabbitMQ's
backtracking trie takes exponential time on ``#.#.#.#.#.a`` against long keys.
"""

from __future__ import annotations

from matcher.base import EMPTY, Matcher, MatchResult
from matcher.grammar import MANY, ONE, Token, Tokens, canonical
from matcher.limits import Limits

_FROZEN_MAX = 16


class _Node:
    """One trie node. ``hash`` is the child reached through a ``#`` edge; that child loops on
    itself for every further word (``#`` may eat any number of words)."""

    __slots__ = ("children", "hash", "ids", "is_hash", "star")

    def __init__(self, is_hash: bool = False) -> None:
        self.children: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        # Small id sets are frozen and replaced on write, so the common single-node match
        # returns them without a copy; past _FROZEN_MAX they become a set (writes stay O(1))
        # and a match copies them.
        self.ids: frozenset[int] | set[int] | None = None
        self.is_hash = is_hash

    def is_empty(self) -> bool:
        return not (self.children or self.star or self.hash or self.ids)


class TrieMatcher(Matcher):
    """Subscribe/unsubscribe O(tokens); match O(frontier x words), bounded by nodes x words."""

    name = "trie"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._root = _Node()
        self._node_count = 1
        self._hash_nodes = 0

    def node_count(self) -> int:
        """Nodes in the trie, root included (the walk's per-level bound)."""
        return self._node_count

    def _check(self) -> None:
        """Assert the structural invariants (tests call this after every mutation): the node
        counters are exact, no node but the root is empty (pruning works), and every id is
        stored exactly once."""
        nodes, hashes, ids = 0, 0, 0
        stack = [self._root]
        while stack:
            node = stack.pop()
            nodes += 1
            hashes += node.is_hash
            ids += len(node.ids or ())
            assert node is self._root or not node.is_empty(), "unpruned empty node"
            assert node.ids is None or node.ids, "empty id set kept"
            assert node.hash is None or node.hash.is_hash
            assert node.hash is None or node.hash.hash is None, "'#' after '#' not merged"
            stack.extend(node.children.values())
            stack.extend(child for child in (node.star, node.hash) if child is not None)
        assert nodes == self._node_count, (nodes, self._node_count)
        assert hashes == self._hash_nodes, (hashes, self._hash_nodes)
        assert ids == len(self._patterns), (ids, len(self._patterns))

    def _add(self, sub_id: int, tokens: Tokens) -> None:
        node = self._root
        for token in canonical(tokens):
            if token is ONE:
                child = node.star
                if child is None:
                    child = node.star = _Node()
                    self._node_count += 1
            elif token is MANY:
                child = node.hash
                if child is None:
                    child = node.hash = _Node(is_hash=True)
                    self._node_count += 1
                    self._hash_nodes += 1
            else:
                assert isinstance(token, str)
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                    self._node_count += 1
            node = child
        ids = node.ids
        if ids is None:
            node.ids = frozenset((sub_id,))
        elif isinstance(ids, frozenset):
            node.ids = ids | {sub_id} if len(ids) < _FROZEN_MAX else {*ids, sub_id}
        else:
            ids.add(sub_id)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        # Walk down remembering the path, then prune nodes left empty (bottom-up).
        path: list[tuple[_Node, Token]] = []
        node = self._root
        for token in canonical(tokens):
            if token is ONE:
                child = node.star
            elif token is MANY:
                child = node.hash
            else:
                assert isinstance(token, str)
                child = node.children.get(token)
            if child is None:
                return
            path.append((node, token))
            node = child
        ids = node.ids
        if ids is None or sub_id not in ids:
            return
        if isinstance(ids, set) and len(ids) > _FROZEN_MAX // 2:
            ids.discard(sub_id)
        else:
            node.ids = frozenset(ids - {sub_id}) or None
        for parent, token in reversed(path):
            if not node.is_empty():
                break
            if token is ONE:
                parent.star = None
            elif token is MANY:
                parent.hash = None
                self._hash_nodes -= 1
            else:
                assert isinstance(token, str)
                del parent.children[token]
            self._node_count -= 1
            node = parent

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        if self._hash_nodes:
            level = self._walk(words, None)
        else:
            # Without '#' there are no loops and no closure, and every node has one parent
            # edge, so a level holds each node at most once: the plain walk is exact.
            level = [self._root]
            for word in words:
                nxt: list[_Node] = []
                for node in level:
                    child = node.children.get(word)
                    if child is not None:
                        nxt.append(child)
                    child = node.star
                    if child is not None:
                        nxt.append(child)
                if not nxt:
                    return EMPTY
                level = nxt
        if len(level) == 1:
            ids = level[0].ids
            if ids is None:
                return EMPTY
            return ids if type(ids) is frozenset else frozenset(ids)
        found: set[int] = set()
        for node in level:
            ids = node.ids
            if ids:
                found |= ids
        return frozenset(found) if found else EMPTY

    def _walk(self, words: list[str], level_sizes: list[int] | None) -> list[_Node]:
        """Nodes reachable after consuming every word, for a trie that may hold ``#``.

        ``level_sizes``, when given, receives the size of each level (the steps taken), so
        tests check the nodes x (words + 1) bound on this very code path.
        """
        level = _closure([self._root])
        if level_sizes is not None:
            level_sizes.append(len(level))
        for word in words:
            nxt: list[_Node] = []
            for node in level:
                if node.is_hash:
                    nxt.append(node)  # '#' eats this word too
                child = node.children.get(word)
                if child is not None:
                    nxt.append(child)
                child = node.star
                if child is not None:
                    nxt.append(child)
            nxt = _closure(nxt)
            if level_sizes is not None:
                level_sizes.append(len(nxt))
            if not nxt:
                return nxt
            level = nxt
        return level


def _closure(nodes: list[_Node]) -> list[_Node]:
    """``nodes`` plus the ``#`` children they reach without eating a word, each node once.

    Canonical patterns never put ``#`` right after ``#``, so one step of closure is complete.
    Only ``#`` nodes can arrive twice (from their parent and from their own loop); every
    other node has one parent edge, and its parent is on the level once.
    """
    seen: set[_Node] = set()
    out: list[_Node] = []
    for node in nodes:
        if node.is_hash:
            if node in seen:
                continue
            seen.add(node)
        out.append(node)
        h = node.hash
        if h is not None and h not in seen:
            seen.add(h)
            out.append(h)
    return out
