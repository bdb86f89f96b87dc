"""Pattern against pattern: do two patterns share a topic (``intersects``), does one match
every topic of another (``contains``)? Exact, in every dialect.

A pattern is a regular language over words (the grammar's internal tokens: literal, ``ONE``,
``MANY``), so both questions are answered on automata whose states are token positions:

* ``intersects``: reachability in the product of the two patterns' automata, O(|P| x |Q|)
  states, each with a few moves;
* ``contains(Q, P)`` (is L(P) a subset of L(Q)?): P's automaton against Q's determinized on the
  fly (sets of Q positions), looking for a topic P takes and Q does not.

Words are infinitely many, so the moves only try the literals of the two patterns and one
*fresh* word, equal to none of them. That is exact: a fresh word is consumed only by a
wildcard, and whatever a wildcard consumes it would consume any other word in its place, so a
topic of P that Q misses stays missed when P's wildcard words become fresh ones.

The dialects' rules on real topics hold too: NATS words are never empty (a fresh word is not
and neither is a NATS literal); an MQTT topic's internal first word is its ``$`` marker,
``"$"`` exactly when its first real word starts with ``$``, and it has at least one real word.
So for MQTT the search also tracks the marker chosen and how many words were read (0, 1, 2+),
and offers a fresh word starting with ``$`` where that matters.

Cost: ``intersects`` O(|P| x |Q|) (66,049 states at most under the default 256-word limit).
``contains`` visits pairs (position of P, set of positions of Q); the sets met are those Q
reaches on P's topics with fresh words, in practice a few per position of P, so it runs in
O(|P| x |Q| x sets); the number of sets is not bounded polynomially in general
(``#.a.*.*.*`` style patterns can need many), which is why ``max_states`` caps the search
(``ContainmentTooComplexError``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Literal, NamedTuple

from pyroaring import BitMap

from matcher.base import Matcher
from matcher.budget import Budget, BudgetExceededError
from matcher.errors import MatcherError
from matcher.grammar import MANY, MQTT_SYSTEM_MARK, ONE, Dialect, Token, Tokens
from matcher.limits import Limits
from matcher.optimized_inverted_bitmap import OptimizedInvertedBitmapMatcher


class ContainmentTooComplexError(MatcherError):
    """The containment search exceeded its state budget (never met in practice)."""


class _Fresh:
    """A word equal to no literal of either pattern (``dollar``: one starting with ``$``)."""

    __slots__ = ("dollar",)

    def __init__(self, dollar: bool) -> None:
        self.dollar = dollar


FRESH: Final = _Fresh(False)
FRESH_DOLLAR: Final = _Fresh(True)
Letter = str | _Fresh

#: Default cap on the states ``contains`` visits.
MAX_STATES: Final = 200_000


def _accepts(token: Token, letter: Letter) -> bool:
    return token is ONE or token is MANY or token == letter


def _closure(tokens: Tokens, i: int) -> Iterator[int]:
    """``i`` and the positions reached from it by ``#`` taking no word."""
    yield i
    while i < len(tokens) and tokens[i] is MANY:
        i += 1
        yield i


class _Rules:
    """Which letters may come next and whether a topic may end, per dialect.

    State: (words read, capped at 2; the first word read when it matters, else None)."""

    def __init__(self, dialect: Dialect) -> None:
        self.mqtt = dialect.mqtt_dollar_rule
        # AMQP: the key "" is zero words, so the one-word sequence [""] is no topic.
        self.no_lone_empty = dialect.empty_topic_allowed and not self.mqtt
        self.start = 0 if self.mqtt or self.no_lone_empty else 2

    def letters(self, read: int, mark: str | None, literals: set[str]) -> list[Letter]:
        if self.mqtt and read == 0:  # the marker word
            return ["", MQTT_SYSTEM_MARK]
        if self.mqtt and read == 1:  # the first real word starts with '$' iff the marker is
            dollar = mark == MQTT_SYSTEM_MARK
            fresh = FRESH_DOLLAR if dollar else FRESH
            return [*(w for w in literals if w.startswith("$") == dollar), fresh]
        return [*literals, FRESH]

    def after(self, read: int, mark: str | None, letter: Letter) -> tuple[int, str | None]:
        if read == 0:
            return 1, letter if isinstance(letter, str) else None
        return 2, mark

    def may_end(self, read: int, mark: str | None) -> bool:
        if self.mqtt:
            return read == 2  # an MQTT topic has at least one real word
        return not (self.no_lone_empty and read == 1 and mark == "")


def intersects(dialect: Dialect, p: Tokens, q: Tokens, budget: Budget | None = None) -> bool:
    """Whether some topic matches both ``p`` and ``q`` (tokens as parsed, any form).
    O(|p| x |q|): a depth-first search of the product, each state met once (``budget``:
    |p| + |q| steps to start, then one per state taken from the stack)."""
    spend = None if budget is None else budget.spend
    if spend is not None:
        spend(len(p) + len(q))
    rules = _Rules(dialect)
    close_p, close_q = _closures(p), _closures(q)
    end_p, end_q = len(p), len(q)
    seen: set[tuple[int, int, int, str | None]] = set()
    todo: list[tuple[int, int, int, str | None]] = [
        (i, k, rules.start, None) for i in close_p[0] for k in close_q[0]
    ]
    while todo:
        state = todo.pop()
        if spend is not None:
            spend(1)
        if state in seen:
            continue
        seen.add(state)
        i, k, read, mark = state
        if i == end_p:
            if k == end_q and rules.may_end(read, mark):
                return True
            continue
        if k == end_q:
            continue
        tp, tq = p[i], q[k]
        literals = {t for t in (tp, tq) if isinstance(t, str)}
        if len(literals) > 1:
            continue  # two different words cannot both be next
        i2 = i if tp is MANY else i + 1
        k2 = k if tq is MANY else k + 1
        for letter in rules.letters(read, mark, literals):
            if literals and letter not in literals:
                continue
            after_read, after_mark = rules.after(read, mark, letter)
            todo.extend(
                (i3, k3, after_read, after_mark) for i3 in close_p[i2] for k3 in close_q[k2]
            )
    return False


def _closures(tokens: Tokens) -> list[tuple[int, ...]]:
    """For each position, itself and the positions after ``#`` taking no word."""
    return [tuple(_closure(tokens, i)) for i in range(len(tokens) + 1)]


#: (position in P, positions of Q, words read capped at 2, first word when it matters)
_State = tuple[int, frozenset[int], int, str | None]


def contains(
    dialect: Dialect,
    q: Tokens,
    p: Tokens,
    max_states: int = MAX_STATES,
    budget: Budget | None = None,
) -> bool:
    """Whether ``q`` matches every topic ``p`` matches (L(p) is a subset of L(q)).

    Searches for a topic of ``p`` that ``q`` misses, reading only ``p``'s literals and fresh
    words (see the module docstring); ``ContainmentTooComplexError`` past ``max_states``.
    ``budget``: |p| + |q| steps to start, then per state taken from the stack one step plus
    one per position of Q it holds (the work of moving them).
    """
    spend = None if budget is None else budget.spend
    if spend is not None:
        spend(len(p) + len(q))
    rules = _Rules(dialect)
    close_p, close_q = _closures(p), _closures(q)
    q_start = frozenset(close_q[0])
    q_end = len(q)
    todo: list[_State] = [(i, q_start, rules.start, None) for i in close_p[0]]
    seen: set[_State] = set()
    while todo:
        state = todo.pop()
        if spend is not None:
            spend(1 + len(state[1]))
        if state in seen:
            continue
        seen.add(state)
        if len(seen) > max_states:
            raise ContainmentTooComplexError(
                "containment_too_complex",
                f"deciding containment needed more than {max_states} states",
            )
        i, qs, read, mark = state
        if i == len(p) and rules.may_end(read, mark) and q_end not in qs:
            return False  # a topic of p that q does not match
        if i == len(p):
            continue
        token = p[i]
        # p's own word here: its literal, or (a wildcard) a fresh word; MQTT's marker and
        # first word are constrained, so the rules pick among the candidates.
        own = {token} if isinstance(token, str) else set()
        candidates = rules.letters(read, mark, own)
        if isinstance(token, str):
            candidates = [c for c in candidates if c == token]
        elif rules.mqtt and read == 0:
            pass  # a wildcard marker: either marker
        else:
            candidates = [c for c in candidates if isinstance(c, _Fresh)]
        for letter in candidates:
            after_read, after_mark = rules.after(read, mark, letter)
            moved = frozenset(
                k3
                for k in qs
                if k < q_end and _accepts(q[k], letter)
                for k3 in close_q[k if q[k] is MANY else k + 1]
            )
            i2 = i if token is MANY else i + 1  # p's own letter: always accepted
            todo.extend((i3, moved, after_read, after_mark) for i3 in close_p[i2])
    return True


Relation = Literal["overlaps", "covered_by"]


#: Candidates ``search`` decides per call before it hands back a place to resume from.
MAX_DECISIONS: Final = 20_000


class Found(NamedTuple):
    """A page of ``search``: the ids found and, when there may be more, the id to pass back
    as ``after`` (the last one found, or the last one decided when the budget ran out)."""

    ids: list[int]
    resume: int | None


def search(
    engine: Matcher,
    pattern: str,
    relation: Relation,
    after: int | None = None,
    limit: int = 100,
    max_decisions: int = MAX_DECISIONS,
    aliases: Mapping[int, int] | None = None,
    budget: Budget | None = None,
) -> Found:
    """Ids of ``engine``'s subscriptions, in id order after ``after``, at most ``limit``, whose
    pattern shares a topic with ``pattern`` (``overlaps``) or whose every topic ``pattern``
    matches (``covered_by``). ``aliases``: ids the engine does not hold, each with the id
    whose pattern it has (a routing table's group members, ``loader.groups``), searched
    too, in the same order; a pattern is decided once per call, whoever else holds it.

    An ``optimized_inverted_bitmap`` engine prunes the candidates with its positional rows
    (no index of its own is needed); any other engine offers all its patterns. Each candidate
    is then decided exactly, in id order, until ``limit`` are found, ``max_decisions`` were
    made or ``budget`` ran out (a step per candidate, and the decisions' own steps), so one
    call's work is bounded; ``resume`` says where to go on. A candidate whose decision the
    budget cannot finish is decided again by the call that resumes before it, so only when
    the very first candidate of a call exhausts the budget does ``BudgetExceededError``
    reach the caller (no progress is possible without a larger budget).
    """
    grammar, limits = engine.dialect, engine.limits
    query = grammar.parse_pattern(pattern, limits)
    aliases = aliases or {}
    candidates: Iterable[int]
    if isinstance(engine, OptimizedInvertedBitmapMatcher):
        pruned = engine.overlap_candidates(pattern)
        if aliases:
            pruned |= BitMap(i for i, holder in aliases.items() if holder in pruned)
        if after is not None:
            pruned.remove_range(0, after + 1)
        candidates = pruned  # a BitMap iterates in id order
    else:
        held = (i for i, _ in engine.subscriptions())
        candidates = sorted(i for i in (*held, *aliases) if after is None or i > after)
    decide = intersects if relation == "overlaps" else _covered
    found: list[int] = []
    decided: dict[int, bool] = {}
    for sub_id in candidates:
        holder = aliases.get(sub_id, sub_id)
        hit = decided.get(holder)
        if hit is None:
            if len(decided) >= max_decisions:
                return Found(found, sub_id - 1)  # every candidate before sub_id is decided
            text = engine.pattern_of(holder)
            if text is None:
                continue  # removed meanwhile
            try:
                if budget is not None:
                    budget.spend(1 + len(text) // 4)  # parsing it, about one step per word
                hit = decide(grammar, query, grammar.parse_pattern(text, limits), budget)
            except BudgetExceededError as e:
                if decided:
                    return Found(found, sub_id - 1)
                assert budget is not None
                raise BudgetExceededError(
                    budget,
                    f"subscription {sub_id} alone needs more: ask with a simpler pattern, or "
                    f"pass after={sub_id} to go on past it",
                ) from e
            decided[holder] = hit
        if hit:
            found.append(sub_id)
            if len(found) >= limit:
                return Found(found, sub_id)
    return Found(found, None)


def _covered(dialect: Dialect, query: Tokens, tokens: Tokens, budget: Budget | None) -> bool:
    return contains(dialect, query, tokens, budget=budget)


#: Steps ``redundant`` takes when no budget is given (about a quarter of a second of work).
REDUNDANCY_STEPS: Final = 300_000


def redundant(
    dialect: Dialect,
    items: Iterable[tuple[int, str]],
    limits: Limits | None = None,
    budget: Budget | None = None,
) -> dict[int, int]:
    """Which of ``items`` (id, pattern; one subscriber's, one dialect) another one covers:
    redundant id -> the id of a covering pattern. Of equivalent patterns (each covers the
    other: the same topics, e.g. ``*.#`` and ``#.*``) the lowest id stays and the others
    count as covered by it, so duplicates count once.

    The items are indexed in a throwaway ``optimized_inverted_bitmap`` (O(tokens) each), whose
    pruning leaves, per pattern, only those that can share a topic with it to decide exactly.
    ``budget`` (by default ``REDUNDANCY_STEPS``) is charged a step per item indexed, per
    candidate met and per state of each containment decision; past it
    ``BudgetExceededError``, rather than run for minutes on thousands of mutually
    overlapping patterns.
    """
    if budget is None:
        budget = Budget("redundancy_budget", REDUNDANCY_STEPS)
    spend = budget.spend
    engine = OptimizedInvertedBitmapMatcher(dialect.name, limits)
    items = list(items)
    spend(len(items))
    engine.subscribe_many(items)
    parse = engine.dialect.parse_pattern
    tokens = {sub_id: parse(text, engine.limits) for sub_id, text in items}
    out: dict[int, int] = {}
    for sub_id, text in items:
        mine = tokens[sub_id]
        for other in engine.overlap_candidates(text):
            spend(1)
            if other == sub_id:
                continue
            theirs = tokens[other]
            if contains(dialect, theirs, mine, budget=budget) and (
                other < sub_id or not contains(dialect, mine, theirs, budget=budget)
            ):
                out[sub_id] = other
                break
    return out
