"""``dfa``: seed 003's DFA, built lazily over the ``cs_trie``, the way good regex engines do.

A DFA state is the set of trie nodes the NFA walk would hold at some position (closure
included). Transitions are computed on first use and cached per word; words that no node of
a state names as a literal share one default transition (through ``*`` and ``#`` only), so
the cache stays bounded by the words patterns name. A match is then one dictionary lookup
per word, with no backtracking and no frontier.

The NFA is a persistent ``cs_trie`` version, so each DFA belongs to exactly one version:
a write publishes a new version with a new, empty DFA, and a reader that holds the previous
one still sees a consistent, complete matcher. Past ``Limits.max_dfa_states`` the DFA is
flushed and rebuilt lazily, so memory stays bounded whatever the topics.
"""

from __future__ import annotations

from collections.abc import Callable

from matcher.base import EMPTY, MatchResult
from matcher.cs_trie import CsTrieMatcher
from matcher.grammar import Tokens
from matcher.limits import Limits
from matcher.trie import WalkNode, WalkRoot, closure


class _State:
    """A set of trie nodes, its accepted ids and its cached transitions."""

    __slots__ = ("default", "nodes", "result", "trans")

    def __init__(self, nodes: tuple[WalkNode, ...]) -> None:
        self.nodes = nodes
        self.trans: dict[str, _State] = {}
        self.default: _State | None = None
        self.result = _accepted(nodes)


def _accepted(nodes: tuple[WalkNode, ...]) -> MatchResult:
    found: set[int] = set()
    for node in nodes:
        if node.ids:
            found.update(node.ids)
    return frozenset(found) if found else EMPTY


class _Dfa:
    """The lazily built automaton of one trie version."""

    __slots__ = ("max_states", "start", "states")

    def __init__(self, root: WalkRoot, max_states: int) -> None:
        self.max_states = max_states
        self.states: dict[frozenset[int], _State] = {}
        self.start = self._intern(closure([root]))

    def _intern(self, nodes: list[WalkNode]) -> _State:
        key = frozenset(map(id, nodes))
        state = self.states.get(key)
        if state is None:
            # setdefault: two readers building the same state agree on one object.
            state = self.states.setdefault(key, _State(tuple(nodes)))
        return state

    def step(self, state: _State, word: str) -> _State:
        """The transition from ``state`` on ``word``, computed and cached on first use."""
        nodes = state.nodes
        if not any(word in node.children for node in nodes):
            nxt = state.default
            if nxt is None:
                nxt = state.default = self._target(nodes, None)
            return nxt
        nxt = self._target(nodes, word)
        state.trans[word] = nxt
        return nxt

    def _target(self, nodes: tuple[WalkNode, ...], word: str | None) -> _State:
        if len(self.states) >= self.max_states:
            # Flush: states already handed out keep working; new ones start a fresh table.
            self.states = {}
        nxt: list[WalkNode] = []
        for node in nodes:
            if node.is_hash:
                nxt.append(node)  # '#' eats this word too
            if word is not None:
                child = node.children.get(word)
                if child is not None:
                    nxt.append(child)
            star = node.star
            if star is not None:
                nxt.append(star)
        return self._intern(closure(nxt))

    def state_count(self) -> int:
        return len(self.states)


class DfaMatcher(CsTrieMatcher):
    """Match O(words) dictionary lookups once warm; each write starts a new, empty DFA."""

    name = "dfa"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._dfa = _Dfa(self._root, self.limits.max_dfa_states)

    def state_count(self) -> int:
        """DFA states built so far for the current version."""
        return self._dfa.state_count()

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        dfa = self._dfa  # one read: a version's DFA only ever sees that version
        state = dfa.start
        step: Callable[[_State, str], _State] | None = None
        for word in words:
            nxt = state.trans.get(word)
            if nxt is None:
                if step is None:
                    step = dfa.step
                nxt = step(state, word)
            state = nxt
        return state.result

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        super()._add(sub_id, tokens, pattern)
        self._dfa = _Dfa(self._root, self.limits.max_dfa_states)

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        super()._remove(sub_id, tokens)
        self._dfa = _Dfa(self._root, self.limits.max_dfa_states)
