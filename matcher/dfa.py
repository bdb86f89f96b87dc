"""``dfa``: RabbitMQ's topic-routing DFA, built lazily over the ``cs_trie``, the way good regex
engines do.

A DFA state is the set of trie nodes the NFA walk would hold at some position (closure
included). Transitions are computed on first use and cached per word; words that no node of
a state names as a literal share one default transition (through ``*`` and ``#`` only), so
the cache stays bounded by the words patterns name. A match is then one dictionary lookup
per word, with no backtracking and no frontier.

The NFA is a persistent ``cs_trie`` version, so each DFA belongs to exactly one version:
a write publishes a new version with a new, empty DFA, and a reader that holds the previous
one still sees a consistent, complete matcher. Past ``Limits.max_dfa_states`` the DFA is
flushed and rebuilt lazily, so memory stays bounded whatever the topics.

Building a state costs O(nodes in it), and a cold topic can need a new state per word (a
128-word key against ``#``-heavy patterns: ~300 nodes per state). So one match builds its
first missing state and then states worth at most ``BUILD_BUDGET`` nodes; past that it
finishes on the trie walk from the state it reached (same answer, O(frontier) per word,
nothing cached). A topic seen again extends
its cached path by that budget each time, so hot topics still end up one lookup per word.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from matcher.base import EMPTY, MatchResult
from matcher.cs_trie import CsTrieMatcher
from matcher.grammar import Tokens
from matcher.limits import Limits
from matcher.trie import WalkNode, WalkRoot, closure, walk_from


class _Key:
    """A dictionary key no word can equal (words are ``str``)."""

    __slots__ = ()


#: Trie nodes' worth of DFA states one match may build before it finishes on the trie walk
#: (a state of k nodes costs about k steps to build, as a walk level of k nodes does, plus
#: sorting and interning it). A match always builds its first missing state, so a topic seen
#: again still extends its cached path; past that, a cold long topic against '#' patterns
#: (states of ~300 nodes, rarely shared) costs about what the trie walk costs (profiled:
#: 512 built 7 such states per cold adversarial topic, 40 % over the walk).
BUILD_BUDGET: Final = 64

#: Keys of a state's transition dictionary that are not words.
_STATE: Final = _Key()
_RESULT: Final = _Key()

#: A state's transitions: word -> the next state's transitions; ``_STATE`` -> the ``_State``,
#: ``_RESULT`` -> its accepted ids (once a match ended there). Keeping the table itself as
#: "the state" makes a warm step one dictionary subscript.
Transitions: TypeAlias = dict[object, Any]


class _State:
    """A set of trie nodes, its transition table and its ``*``/``#``-only transition."""

    __slots__ = ("default", "nodes", "trans")

    def __init__(self, nodes: tuple[WalkNode, ...]) -> None:
        self.nodes = nodes
        self.default: _State | None = None
        self.trans: Transitions = {_STATE: self}

    def result(self) -> MatchResult:
        """The ids this state accepts, computed on first use (then under ``_RESULT``): most
        states a long topic builds are passed through, never ended on. Two readers may both
        compute it; they store equal sets."""
        result: MatchResult | None = self.trans.get(_RESULT)
        if result is None:
            result = self.trans[_RESULT] = _accepted(self.nodes)
        return result


def _accepted(nodes: tuple[WalkNode, ...]) -> MatchResult:
    found: set[int] = set()
    for node in nodes:
        if node.ids:
            found.update(node.ids)
    return frozenset(found) if found else EMPTY


class _Dfa:
    """The lazily built automaton of one trie version.

    Both tables are bounded: past ``max_states`` states or ``max_transitions`` cached
    transitions, the cache starts afresh from the start state (readers already inside the
    old tables finish there).
    """

    __slots__ = ("max_states", "max_transitions", "root", "start", "states", "transitions")

    def __init__(self, root: WalkRoot, max_states: int, max_transitions: int) -> None:
        self.root = root
        self.max_states = max_states
        self.max_transitions = max_transitions
        self.transitions = 0
        self.states: dict[tuple[WalkNode, ...], _State] = {}
        self.start = self._intern(closure([root]))

    def _intern(self, nodes: list[WalkNode]) -> _State:
        # Nodes hash by identity; sorting by id makes one tuple per node set, and that
        # tuple is both the key and the state's node list (no second copy).
        key = tuple(sorted(nodes, key=id))
        state = self.states.get(key)
        if state is None:
            # setdefault: two readers building the same state agree on one object.
            state = self.states.setdefault(key, _State(key))
        return state

    def step(self, trans: Transitions, word: str) -> Transitions:
        """The transitions after ``word`` from the state whose table is ``trans``, computed
        and cached on first use. Words that no node of the state names share one target
        (the default transition), computed once per state."""
        state: _State = trans[_STATE]
        nodes = state.nodes
        if any(word in node.children for node in nodes):
            nxt = self._target(nodes, word)
        else:
            default = state.default
            if default is None:
                default = state.default = self._target(nodes, None)
            nxt = default
        if self.transitions >= self.max_transitions or len(self.states) >= self.max_states:
            self._flush()
        else:
            self.transitions += 1
            trans[word] = nxt.trans
        return nxt.trans

    def _flush(self) -> None:
        start_nodes = self.start.nodes
        self.states = {}
        self.transitions = 0
        self.start = self._intern(list(start_nodes))

    def _target(self, nodes: tuple[WalkNode, ...], word: str | None) -> _State:
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


def _walked(root: WalkRoot, nodes: tuple[WalkNode, ...], words: list[str]) -> MatchResult:
    """Ids reached by walking the trie of ``root`` from the DFA state ``nodes`` over
    ``words``: the same answer the DFA would give, without building states."""
    found: set[int] = set()
    for node in walk_from(list(nodes), words, root.max_tail, None):
        if node.ids:
            found.update(node.ids)
    return frozenset(found) if found else EMPTY


class DfaMatcher(CsTrieMatcher):
    """Match O(words) dictionary lookups once warm; each write starts a new, empty DFA."""

    name = "dfa"

    def __init__(self, dialect: str = "amqp", limits: Limits | None = None) -> None:
        super().__init__(dialect, limits)
        self._dfa = self._new_dfa()

    def _new_dfa(self) -> _Dfa:
        limits = self.limits
        return _Dfa(self._root, limits.max_dfa_states, limits.max_dfa_transitions)

    def state_count(self) -> int:
        """DFA states built so far for the current version."""
        return self._dfa.state_count()

    def match(self, topic: str) -> MatchResult:
        words = self._split(topic)
        dfa = self._dfa  # one read: a version's DFA only ever sees that version
        trans = dfa.start.trans
        budget = BUILD_BUDGET
        for position, word in enumerate(words):
            try:
                trans = trans[word]
            except KeyError:
                nodes = trans[_STATE].nodes
                if budget <= 0:
                    return _walked(dfa.root, nodes, words[position:])
                budget -= len(nodes)
                trans = dfa.step(trans, word)
        try:
            result: MatchResult = trans[_RESULT]
        except KeyError:
            return trans[_STATE].result()  # type: ignore[no-any-return]
        return result

    def _add(self, sub_id: int, tokens: Tokens, pattern: str) -> None:
        super()._add(sub_id, tokens, pattern)
        self._dfa = self._new_dfa()

    def _add_many(self, items: list[tuple[int, Tokens, str]]) -> None:
        super()._add_many(items)
        self._dfa = self._new_dfa()

    def _remove(self, sub_id: int, tokens: Tokens) -> None:
        super()._remove(sub_id, tokens)
        self._dfa = self._new_dfa()
