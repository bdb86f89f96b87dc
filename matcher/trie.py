"""``trie``: a word trie with ``*`` and ``#`` edges, walked breadth-first over the topic.

The walk keeps, for each topic position, the set of trie nodes reachable there (an NFA
simulation, as in RabbitMQ's lazy DFA without the caching). A node enters a level at most once,
so a match costs at most ``nodes x (words + 1)`` steps whatever the ``#`` count; RabbitMQ's
backtracking trie takes exponential time on ``#.#.#.#.#.a`` against long keys.

Two counters kept on writes let the walk drop most of that frontier on long topics: each node
counts the patterns through it that still have a ``#`` ahead (``feeds``), and the root knows
the longest run of tokens after a pattern's last ``#`` (``max_tail``). A node that leads to no
``#`` can only matter if it can still reach an id on the last word, so until the last
``max_tail`` words the walk keeps only nodes that lead to a ``#`` (see ``walk_from``).

``TrieWalker`` holds the walk; ``TrieMatcher`` (mutable nodes) and ``CsTrieMatcher``
(persistent nodes, in ``cs_trie``) only differ in how they write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol, TypeAlias, TypeVar

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
    on itself for every further word (``#`` may eat any number of words). ``feeds`` counts
    the patterns through the node that have a ``#`` token after it (0: it leads to no ``#``).
    """

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
    @property
    def feeds(self) -> int: ...


class WalkRoot(WalkNode, Protocol):
    """The root also counts the trie's nodes, so one read of the root gives a reader a
    consistent answer to "is there any ``#`` to follow?"; ``max_tail`` is the longest run of
    tokens after a pattern's last ``#`` (its whole length without one)."""

    @property
    def node_count(self) -> int: ...
    @property
    def hash_count(self) -> int: ...
    @property
    def max_tail(self) -> int: ...


class TrieWalker(Matcher):
    """Matching over any trie of ``WalkNode``; subclasses keep ``_root`` current."""

    _root: WalkRoot

    def node_count(self) -> int:
        """Nodes in the trie, root included (the walk's per-level bound)."""
        return self._root.node_count

    def match(self, topic: str) -> MatchResult:
        return self.match_words(self._split(topic))

    def match_words(self, words: list[str]) -> MatchResult:
        """``match`` for a topic already split (and so validated) into words."""
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
        root (pruning works), ``#`` never right after ``#``, each id stored once, and
        ``feeds`` and ``max_tail`` equal to what the patterns say (the walk prunes by them)."""
        root = self._root
        feeds: dict[int, int] = {}
        tails = [0]
        for text in self._patterns.values():
            tokens = canonical(self.dialect.parse_pattern(text, self.limits))
            last = last_hash(tokens)
            tails.append(len(tokens) - 1 - last)
            at: WalkNode | None = root
            for j, token in enumerate(tokens):
                assert at is not None
                if j <= last:
                    feeds[id(at)] = feeds.get(id(at), 0) + 1
                at = child_for(at, token)
        assert root.max_tail == max(tails), (root.max_tail, max(tails))
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
            assert node.feeds == feeds.get(id(node), 0), "feeds out of date"
            stack.extend(node.children.values())
            stack.extend(child for child in (node.star, node.hash) if child is not None)
        assert nodes == root.node_count, (nodes, root.node_count)
        assert hashes == root.hash_count, (hashes, root.hash_count)
        assert ids == len(self._patterns), (ids, len(self._patterns))


def walk(root: WalkRoot, words: list[str], level_sizes: list[int] | None) -> list[WalkNode]:
    """Nodes reachable after consuming every word, for a trie that may hold ``#``."""
    return walk_from([root], words, root.max_tail, level_sizes)


#: Nodes a "leads only to active ``#`` nodes" proof may visit before giving up (the walk
#: then keeps the node: giving up is always safe, and bounds a proof's cost).
SPENT_PROBE: Final = 32


def walk_from(
    start: list[WalkNode], words: list[str], max_tail: int, level_sizes: list[int] | None
) -> list[WalkNode]:
    """Nodes reachable from ``start`` (a closed set of nodes: each one's ``#`` child in it
    too, or reached by it) after consuming every word; ``max_tail`` bounds how many words a
    node that leads to no ``#`` (``feeds == 0``) can still consume before an id.

    A ``#`` node, once reached, stays reachable at every later position (it eats any number
    of words), so it is kept in ``active`` instead of being carried level to level. In a
    canonical trie its only edges are literal ones (``#.#`` merges, ``#.*`` becomes ``*.#``),
    and those are merged into ``by_word`` when it is reached: a level then costs the nodes
    that actually match the word, not every ``#`` seen so far.

    Pruning (exact), before level ``cut = len(words) - max_tail``: there, more words remain
    than any node without a ``#`` ahead can consume before an id, so a node matters only if
    it can still reach a ``#`` node that is not active yet (reaching an active one again
    changes nothing). So until ``cut`` the walk drops nodes with ``feeds == 0``, and keeps in
    ``by_word`` only the ``#`` children not proven ``spent`` (every ``#`` below them, through
    literal and ``*`` edges, already active). A child that is not spent waits on the first
    inactive ``#`` its proof met and is proved again only when that one becomes active;
    proofs are memoized and capped at ``SPENT_PROBE`` nodes. At ``cut`` ``by_word`` is
    rebuilt in full. While the level is empty and ``by_word`` holds nothing, nothing can
    change before ``cut``, so the walk jumps there.

    Each node is processed at most once per level (non-``#`` nodes have one parent edge;
    ``#`` nodes enter ``active`` once), so a match takes at most nodes x (words + 1) steps,
    plus at most ``SPENT_PROBE`` per proof, and a ``#`` child is proved at most once per
    ``#`` node that becomes active. ``level_sizes``, when given, receives the nodes live at
    each level, so tests check that bound on this very code path.
    """
    active: set[WalkNode] = set()
    by_word: dict[str, dict[WalkNode, None]] = {}
    spent: set[WalkNode] = set()
    # inactive '#' node -> the (word, '#' child) entries of by_word whose proof it stopped
    waiting: dict[WalkNode, list[tuple[str, WalkNode]]] = {}
    n = len(words)
    cut = n - max_tail
    pruning = cut > 0

    def blocker(node: WalkNode) -> WalkNode | None:
        """None when ``node`` is spent; else an inactive ``#`` below it (``node`` itself
        when the proof ran out of probe: never active, so never proved again)."""
        visited: list[WalkNode] = []
        stack = [node]
        while stack:
            x = stack.pop()
            if x in spent:
                continue
            h = x.hash
            if h is not None and h not in active:
                return h
            visited.append(x)
            if len(visited) > SPENT_PROBE or len(x.children) > SPENT_PROBE:
                return node
            stack.extend([child for child in list(x.children.values()) if child.feeds])
            star = x.star
            if star is not None and star.feeds:
                stack.append(star)
        spent.update(visited)
        return None

    def wait_or_drop(word: str, child: WalkNode) -> None:
        on = blocker(child)
        if on is not None:
            by_word.setdefault(word, {})[child] = None
            waiting.setdefault(on, []).append((word, child))
        else:
            targets = by_word.get(word)
            if targets is not None and child in targets:
                del targets[child]
                if not targets:
                    del by_word[word]

    def reach(hashes: list[WalkNode]) -> None:
        for h in hashes:
            if h in active:
                continue
            active.add(h)
            # list(): one atomic copy, so a writer adding a child meanwhile (mutable trie)
            # cannot break the iteration.
            if not pruning:
                for word, child in list(h.children.items()):
                    by_word.setdefault(word, {})[child] = None
                continue
            for word, child in list(h.children.items()):
                if child.feeds:
                    wait_or_drop(word, child)
            for word, child in waiting.pop(h, ()):
                wait_or_drop(word, child)

    level = [node for node in start if not node.is_hash]
    reach([node for node in start if node.is_hash])
    reach([h for node in level if (h := node.hash) is not None])
    if level_sizes is not None:
        level_sizes.append(len(level) + len(active))
    i = 0
    while i < n:
        word = words[i]
        i += 1
        nxt: list[WalkNode] = []
        if pruning:
            if i < cut:
                for node in level:
                    child = node.children.get(word)
                    if child is not None and child.feeds:
                        nxt.append(child)
                    child = node.star
                    if child is not None and child.feeds:
                        nxt.append(child)
            else:
                pruning = False  # from here on every node may reach an id on the last word
                hashes = list(active)
                active.clear()
                by_word.clear()
                waiting.clear()
                reach(hashes)
        if not pruning:
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
        new = [h for node in nxt if (h := node.hash) is not None and h not in active]
        if new:
            reach(new)
        if level_sizes is not None:
            level_sizes.append(len(nxt) + len(active))
        if not nxt:
            if not active:
                return nxt
            if pruning and not by_word and i < cut - 1:
                # Only '#' self-loops remain, none leading on: skip to the last levels.
                if level_sizes is not None:
                    level_sizes.extend([len(active)] * (cut - 1 - i))
                i = cut - 1
        level = nxt
    level.extend(active)
    return level


def last_hash(tokens: Tokens) -> int:
    """Index of the last ``#`` in ``tokens``, -1 without one. The nodes a pattern passes
    before that token (root included) are the ones it ``feeds``; the tokens after it are its
    tail."""
    for j in range(len(tokens) - 1, -1, -1):
        if tokens[j] is MANY:
            return j
    return -1


class Tails:
    """How many patterns have each tail length, and the longest (``WalkRoot.max_tail``)."""

    __slots__ = ("counts", "longest")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.longest = 0

    def add(self, tail: int) -> None:
        self.counts[tail] = self.counts.get(tail, 0) + 1
        self.longest = max(self.longest, tail)

    def remove(self, tail: int) -> None:
        left = self.counts[tail] - 1
        if left:
            self.counts[tail] = left
        else:
            del self.counts[tail]
            if tail == self.longest:
                self.longest = max(self.counts, default=0)


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

    __slots__ = ("children", "feeds", "hash", "ids", "is_hash", "star")

    def __init__(self, is_hash: bool = False) -> None:
        self.children: dict[str, TrieNode] = {}
        self.star: TrieNode | None = None
        self.hash: TrieNode | None = None
        self.ids: frozenset[int] | set[int] | None = None
        self.is_hash = is_hash
        self.feeds = 0

    def is_empty(self) -> bool:
        return not (self.children or self.star or self.hash or self.ids)


class TrieRoot(TrieNode):
    __slots__ = ("hash_count", "max_tail", "node_count", "tails")

    def __init__(self) -> None:
        super().__init__()
        self.node_count = 1
        self.hash_count = 0
        self.tails = Tails()
        self.max_tail = 0


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
        tokens = canonical(tokens)
        last = last_hash(tokens)
        # A longer tail first: a reader that sees the new pattern must not prune it.
        root.tails.add(len(tokens) - 1 - last)
        root.max_tail = root.tails.longest
        node: TrieNode = root
        for j, token in enumerate(tokens):
            if j <= last:
                node.feeds += 1
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
        tokens = canonical(tokens)
        for token in tokens:
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
        last = last_hash(tokens)
        for parent, _ in path[: last + 1]:
            parent.feeds -= 1
        # A shorter tail last: until the pattern is gone, readers must not prune it.
        root.tails.remove(len(tokens) - 1 - last)
        root.max_tail = root.tails.longest
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
