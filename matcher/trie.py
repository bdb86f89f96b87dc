"""``trie``: a word trie with ``*`` and ``#`` edges, walked breadth-first over the topic.

The walk keeps, for each topic position, the set of trie nodes reachable there (an NFA
simulation, as in seed 003's DFA without the caching). A node enters a level at most once,
so a match costs at most ``nodes x (words + 1)`` steps whatever the ``#`` count; RabbitMQ's
backtracking trie takes exponential time on ``#.#.#.#.#.a`` against long keys.

``TrieWalker`` holds the walk; ``TrieMatcher`` (mutable nodes) and ``CsTrieMatcher``
(persistent nodes, in ``cs_trie``) only differ in how they write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeAlias, TypeVar

from immutables import Map

from matcher.base import EMPTY, Matcher, MatchResult
from matcher.grammar import MANY, ONE, Token, Tokens, canonical
from matcher.limits import Limits

#: Ids stored at a node: small sets are frozen and replaced on write, so the common
#: single-node match returns them without a copy; larger ones are a ``set`` (``trie``) or a
#: persistent ``Map`` (``cs_trie``), so writes stay cheap, and a match copies them.
N = TypeVar("N", bound="WalkNode")

IdSet: TypeAlias = frozenset[int] | set[int] | Map[int, None]
FROZEN_MAX = 16


class WalkNode(Protocol):
    """What the walk reads of a node; ``hash`` is the child behind a ``#`` edge, which loops
    on itself for every further word (``#`` may eat any number of words)."""

    @property
    def children(self) -> Mapping[str, WalkNode]: ...
    @property
    def star(self) -> WalkNode | None: ...
    @property
    def hash(self) -> WalkNode | None: ...
    @property
    def ids(self) -> IdSet | None: ...
    @property
    def is_hash(self) -> bool: ...


class WalkRoot(WalkNode, Protocol):
    """The root also counts the trie's nodes, so one read of the root gives a reader a
    consistent answer to "is there any ``#`` to follow?"."""

    @property
    def node_count(self) -> int: ...
    @property
    def hash_count(self) -> int: ...


class TrieWalker(Matcher):
    """Matching over any trie of ``WalkNode``; subclasses keep ``_root`` current."""

    _root: WalkRoot

    def node_count(self) -> int:
        """Nodes in the trie, root included (the walk's per-level bound)."""
        return self._root.node_count

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        root = self._root  # one read: writers replace, never half-update, what it reaches
        if root.hash_count:
            level = walk(root, words, None)
        else:
            # Without '#' there are no loops and no closure, and every node has one parent
            # edge, so a level holds each node at most once: the plain walk is exact.
            level = [root]
            for word in words:
                nxt: list[WalkNode] = []
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
                try:
                    found |= ids  # type: ignore[arg-type]
                except TypeError:  # a persistent Map of ids (cs_trie), not a set
                    found.update(ids)
        return frozenset(found) if found else EMPTY

    def _walk(self, words: list[str], level_sizes: list[int] | None) -> list[WalkNode]:
        return walk(self._root, words, level_sizes)

    def _check_reachable(self) -> None:
        """Invariants every trie keeps: exact counters on the root, no empty node but the
        root (pruning works), ``#`` never right after ``#``, each id stored once."""
        root = self._root
        nodes, hashes, ids = 0, 0, 0
        stack: list[WalkNode] = [root]
        while stack:
            node = stack.pop()
            nodes += 1
            hashes += node.is_hash
            ids += len(node.ids or ())
            assert node.ids is None or node.ids, "empty id set kept"
            assert node is root or node.ids or node.children or node.star or node.hash, (
                "unpruned empty node"
            )
            assert node.hash is None or node.hash.is_hash
            # canonical form: '#' nodes have literal edges only ('#.#' and '#.*' rewritten)
            assert not node.is_hash or (node.hash is None and node.star is None), "non-canonical"
            stack.extend(node.children.values())
            stack.extend(child for child in (node.star, node.hash) if child is not None)
        assert nodes == root.node_count, (nodes, root.node_count)
        assert hashes == root.hash_count, (hashes, root.hash_count)
        assert ids == len(self._patterns), (ids, len(self._patterns))


def walk(root: WalkNode, words: list[str], level_sizes: list[int] | None) -> list[WalkNode]:
    """Nodes reachable after consuming every word, for a trie that may hold ``#``.

    A ``#`` node, once reached, stays reachable at every later position (it eats any number
    of words), so it is kept in ``active`` instead of being carried level to level. In a
    canonical trie its only edges are literal ones (``#.#`` merges, ``#.*`` becomes ``*.#``),
    and those are merged into ``by_word`` when it is reached: a level then costs the nodes
    that actually match the word, not every ``#`` seen so far.

    Each node is processed at most once per level (non-``#`` nodes have one parent edge;
    ``#`` nodes enter ``active`` once), so a match takes at most nodes x (words + 1) steps.
    ``level_sizes``, when given, receives the nodes live at each level, so tests check that
    bound on this very code path.
    """
    active: set[WalkNode] = set()
    by_word: dict[str, list[WalkNode]] = {}

    def reach(nodes: list[WalkNode]) -> None:
        for node in nodes:
            h = node.hash
            if h is not None and h not in active:
                active.add(h)
                # list(): one atomic copy, so a writer adding a child meanwhile (mutable
                # trie) cannot break the iteration.
                for word, child in list(h.children.items()):
                    targets = by_word.get(word)
                    if targets is None:
                        by_word[word] = [child]
                    else:
                        targets.append(child)

    level = [root]
    reach(level)
    if level_sizes is not None:
        level_sizes.append(len(level) + len(active))
    for word in words:
        nxt: list[WalkNode] = []
        for node in level:
            child = node.children.get(word)
            if child is not None:
                nxt.append(child)
            child = node.star
            if child is not None:
                nxt.append(child)
        from_hash = by_word.get(word)
        if from_hash is not None:
            nxt.extend(from_hash)
        reach(nxt)
        if level_sizes is not None:
            level_sizes.append(len(nxt) + len(active))
        if not nxt and not active:
            return nxt
        level = nxt
    level.extend(active)
    return level


def child_for(node: N, token: Token) -> N | None:
    """The child of ``node`` that ``token`` leads to (a literal, ``*`` or ``#`` edge)."""
    if isinstance(token, str):
        return node.children.get(token)  # type: ignore[return-value]
    return node.star if token is ONE else node.hash  # type: ignore[return-value]


def closure(nodes: list[WalkNode]) -> list[WalkNode]:
    """``nodes`` plus the ``#`` children they reach without eating a word, each node once.

    Canonical patterns never put ``#`` right after ``#``, so one step of closure is complete.
    Only ``#`` nodes can arrive twice (from their parent and from their own loop); every
    other node has one parent edge, and its parent is on the level once.
    """
    seen: set[WalkNode] = set()
    out: list[WalkNode] = []
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


class TrieNode:
    """A mutable trie node (see ``WalkNode``)."""

    __slots__ = ("children", "hash", "ids", "is_hash", "star")

    def __init__(self, is_hash: bool = False) -> None:
        self.children: dict[str, TrieNode] = {}
        self.star: TrieNode | None = None
        self.hash: TrieNode | None = None
        self.ids: frozenset[int] | set[int] | None = None
        self.is_hash = is_hash

    def is_empty(self) -> bool:
        return not (self.children or self.star or self.hash or self.ids)


class TrieRoot(TrieNode):
    __slots__ = ("hash_count", "node_count")

    def __init__(self) -> None:
        super().__init__()
        self.node_count = 1
        self.hash_count = 0


class TrieMatcher(TrieWalker):
    """Subscribe/unsubscribe O(tokens); match O(frontier x words), bounded by nodes x words.
    Readers need no lock: a writer links a new branch in only once it is complete, adds an
    id last and removes it first."""

    name = "trie"
    _root: TrieRoot

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._root = TrieRoot()

    def _check(self) -> None:
        self._check_reachable()

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        root = self._root
        node: TrieNode = root
        for token in canonical(tokens):
            if isinstance(token, str):
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = TrieNode()
                    root.node_count += 1
            elif token is ONE:
                child = node.star
                if child is None:
                    child = node.star = TrieNode()
                    root.node_count += 1
            else:
                child = node.hash
                if child is None:
                    child = TrieNode(is_hash=True)
                    root.node_count += 1
                    root.hash_count += 1
                    node.hash = child
            node = child
        ids = node.ids
        if ids is None:
            node.ids = frozenset((sub_id,))
        elif isinstance(ids, frozenset):
            node.ids = ids | {sub_id} if len(ids) < FROZEN_MAX else {*ids, sub_id}
        else:
            ids.add(sub_id)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        # Walk down remembering the path, then prune nodes left empty (bottom-up).
        root = self._root
        path: list[tuple[TrieNode, Token]] = []
        node: TrieNode = root
        for token in canonical(tokens):
            child = child_for(node, token)
            if child is None:
                return
            path.append((node, token))
            node = child
        ids = node.ids
        if ids is None or sub_id not in ids:
            return
        if isinstance(ids, set) and len(ids) > FROZEN_MAX // 2:
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
                root.hash_count -= 1
            else:
                assert isinstance(token, str)
                del parent.children[token]
            root.node_count -= 1
            node = parent
