"""The in-memory routing table: every tenant's matchers plus the catalog they answer from.

Tenants are isolated by construction: each (tenant, dialect) has its own topic matchers and
each tenant its own headers matcher, so a match can only ever see its own tenant's ids.
The catalog (id -> subscription facts, ``loader.catalog``: compact columns plus a small
persistent delta) is published together with the sequence number it reflects, so
``snapshot()`` is O(1) and always consistent. Matches name their subscribers from a plain
list indexed by id (``_by_id``), the cheapest lookup Python has: no map walk per id.

``RoutingTable`` is the one class. Its state is ``loader.state``'s; its jobs live in a
module each: answering (here), applying changes (``loader.applying``), building in bulk
(``loader.building``), repair and checks (``loader.repairing``); the matchers are made in
one place, ``loader.engines``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from time import time

from loader.applying import Applying
from loader.building import Building
from loader.catalog import Entry
from loader.engines import HEADERS_VALIDATOR, validator
from loader.expiry import batch_without, without
from loader.groups import Delivery
from loader.repairing import Repairing
from loader.shadow import ShadowCheck
from matcher import EMPTY, BatchIds, Matcher, MatchResult
from matcher.budget import Budget
from matcher.overlap import Found, Relation, search
from store.records import HEADERS_DIALECT


class RoutingTable(Repairing, Building, Applying):
    """Matchers for every (tenant, dialect), kept current by one applier thread at a time.

    ``engines`` are all built and kept current (up to ``shadow_max`` subscriptions per
    (tenant, dialect) for all but the first); the first answers matches, and with a
    ``shadow`` check the others answer a sample of matches too (see ``loader.shadow``).

    Every read drops the subscriptions whose expiry has passed, though the engines hold
    them until the sweep's remove arrives (``loader.expiry``): one clock read and one
    comparison per read while none has.
    """

    # -- reads --------------------------------------------------------------------------

    def match(self, tenant: str, dialect: str, topic: str) -> MatchResult:
        """Ids of ``tenant``'s subscriptions in ``dialect`` whose pattern matches ``topic``:
        ``routes`` with the group members each stands for (O(matching subscriptions)).
        Raises the matcher's errors for an invalid topic, even with no subscription."""
        found = self.groups.expand((tenant, dialect), self._routes(tenant, dialect, topic))
        if self.expiry.next > time():
            return found
        return without(found, self.expiry.due(time()))

    def routes(self, tenant: str, dialect: str, topic: str) -> MatchResult:
        """What the engines answer for ``topic``: ``match``, except that the members of a
        group sharing one pattern are one id, its route (``loader.groups``), so a match
        into a group of 20,000 workers on ``jobs.#`` costs one id, not 20,000. What
        ``deliver`` takes (which skips a route's expired members). Raises like ``match``."""
        found = self._routes(tenant, dialect, topic)
        if self.expiry.next > time():
            return found
        return without(found, self.expiry.due(time()), self.groups.stands_for_others)

    def _routes(self, tenant: str, dialect: str, topic: str) -> MatchResult:
        """``routes`` as the engines answer, expired ids included."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            validator(dialect, self.limits).match(topic)
            return EMPTY
        shadow = self.shadow
        if shadow is None or len(matchers) == 1 or not shadow.due():
            return matchers[self._primary].match(topic)
        return self._shadow_match(matchers, shadow, tenant, dialect, topic)

    def _shadow_match(
        self,
        matchers: dict[str, Matcher],
        shadow: ShadowCheck,
        tenant: str,
        dialect: str,
        topic: str,
    ) -> MatchResult:
        primary = self._primary
        seq, writing = self._catalog.seq, self._apply_lock.locked()
        answer = matchers[primary].match(topic)
        others = {name: m for name, m in matchers.items() if name != primary}
        wrong = [name for name, m in others.items() if set(m.match(topic)) != set(answer)]
        if not writing and not self._apply_lock.locked() and self._catalog.seq == seq:
            shadow.record(wrong, topic, f"tenant {tenant!r}, {dialect}")
        return answer

    def match_ids(self, tenant: str, dialect: str, topics: Iterable[str]) -> BatchIds:
        """``routes`` for each of ``topics`` (for a tenant without groups: ``match``),
        answered in arrays by the answering engine's ``Matcher.match_ids`` (``native``: the
        walks in C without the GIL, no Python object per id), with one matcher look-up per
        batch. With a shadow check each topic counts as one match toward the sample
        (``_shadow_batch``). Invalid topics get their error, also for a tenant with no
        subscriptions. ``subscriber_names`` names the ids."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            return validator(dialect, self.limits).match_ids(topics)
        shadow = self.shadow
        if shadow is None or not shadow.every or len(matchers) == 1:
            found = matchers[self._primary].match_ids(topics)
        else:
            topics = topics if isinstance(topics, Sequence) else list(topics)
            seq, writing = self._catalog.seq, self._apply_lock.locked()
            found = matchers[self._primary].match_ids(topics)
            self._shadow_batch(matchers, shadow, (tenant, dialect), topics, found, seq, writing)
        if self.expiry.next > time():  # read after the walks: what expired meanwhile goes
            return found
        return batch_without(found, self.expiry.due(time()))

    def subscriber_names(self) -> tuple[list[str | None], dict[int, str]]:
        """Who holds each id, as the answer encoder reads it (``app.delivery``): the name
        at index id of the list when it reaches that far and is set, else in the dict, else
        none (removed since the match). Live views, changed by the applier with the GIL
        held: read them with the GIL held, never keep them."""
        return self._by_id, self._far

    def _shadow_batch(
        self,
        matchers: dict[str, Matcher],
        shadow: ShadowCheck,
        key: tuple[str, str],
        topics: Sequence[str],
        found: BatchIds,
        seq: int,
        writing: bool,
    ) -> None:
        """The shadow check of a batch ``match_ids`` answered: each topic counts as one
        match toward the sample, and those due are answered by the other engines too and
        compared (``_shadow_match`` for one topic; ``seq``/``writing`` were read before the
        batch, so a batch that raced a write records nothing)."""
        counts, ids, errors = found
        due: list[tuple[str, set[int]]] = []
        for k in shadow.due_among(len(counts)):
            if k not in errors:
                at = sum(counts[:k])
                due.append((topics[k], set(ids[at : at + counts[k]])))
        others = {name: m for name, m in matchers.items() if name != self._primary}
        for topic, answer in due:
            wrong = [name for name, m in others.items() if set(m.match(topic)) != answer]
            if not writing and not self._apply_lock.locked() and self._catalog.seq == seq:
                shadow.record(wrong, topic, f"tenant {key[0]!r}, {key[1]}")

    def match_headers(self, tenant: str, headers: Mapping[str, str]) -> MatchResult:
        """``tenant``'s headers subscriptions that ``headers`` satisfy (``match``'s
        counterpart: every member of a group)."""
        key = (tenant, HEADERS_DIALECT)
        found = self.groups.expand(key, self._header_routes(tenant, headers))
        if self.expiry.next > time():
            return found
        return without(found, self.expiry.due(time()))

    def header_routes(self, tenant: str, headers: Mapping[str, str]) -> MatchResult:
        """``match_headers`` as ``routes`` answers (``routes``' counterpart)."""
        found = self._header_routes(tenant, headers)
        if self.expiry.next > time():
            return found
        return without(found, self.expiry.due(time()), self.groups.stands_for_others)

    def _header_routes(self, tenant: str, headers: Mapping[str, str]) -> MatchResult:
        matcher = self._headers.get(tenant)
        if matcher is None:
            HEADERS_VALIDATOR.match(headers)
            return EMPTY
        return matcher.match(headers)

    def sizes(self) -> dict[tuple[str, str], int]:
        """Subscriptions per (tenant, dialect) now, ``headers`` included: O(tenants x
        dialects), read from the matchers' own counts (the metrics scrape calls it)."""
        primary = self._primary
        hidden = self.groups.hidden  # the group members a route stands for
        # tuple(): one C-level copy, so the applier adding a tenant meanwhile cannot break
        # the iteration ("dictionary changed size").
        sizes = {
            key: len(matchers[primary]) + hidden(key)
            for key, matchers in tuple(self._topic.items())
        }
        for tenant, headers in tuple(self._headers.items()):
            key = (tenant, HEADERS_DIALECT)
            sizes[key] = len(headers) + hidden(key)
        return {key: size for key, size in sizes.items() if size}

    def check_room(self, items: Iterable[tuple[str, str, str]]) -> None:
        """Raise CapacityError when subscribing ``items`` ((tenant, dialect, pattern),
        valid and new) might not fit their groups' answering engine now (its
        ``Matcher.check_room``): the admin writes ask before they store, so a full engine
        refuses a write (403) instead of leaving it unserved (see apply). Advisory: the
        applier decides. O(items)."""
        groups: dict[tuple[str, str], list[str]] = {}
        for tenant, dialect, pattern in items:
            if dialect != HEADERS_DIALECT:
                groups.setdefault((tenant, dialect), []).append(pattern)
        for key, patterns in groups.items():
            matchers = self._topic.get(key)
            if matchers:
                matchers[self._primary].check_room(patterns)

    def capacity_fill(self) -> dict[str, float]:
        """Per fixed capacity of the answering engine (``Matcher.capacity()``; ``native``'s:
        trie nodes, tail words, text bytes), the fullest matcher's used share, 0 to 1; empty
        for an engine without such capacities. O(tenants x dialects) (the metrics scrape
        calls it: past 1, that matcher's writes are refused)."""
        fill: dict[str, float] = {}
        for matchers in tuple(self._topic.values()):
            for name, (used, limit) in matchers[self._primary].capacity().items():
                fill[name] = max(fill.get(name, 0.0), used / limit)
        return fill

    def deliver(self, tenant: str, ids: Iterable[int], key: str) -> Delivery:
        """Who of a match's ``ids`` (``routes``, or ``match``) receives the message: the
        ungrouped ones plus one member per group (``loader.groups``; ``key`` for the
        ``hash`` policy), never an expired one."""
        expired = self.expiry.due(time()) if self.expiry.next <= time() else frozenset()
        return self.groups.deliver(tenant, ids, key, expired)

    def entries(self, ids: Iterable[int]) -> dict[int, Entry]:
        """The catalog's entry of each of ``ids`` still present (explain shows patterns)."""
        entries = self._catalog.entries
        return {i: entry for i in ids if (entry := entries.get(i)) is not None}

    def patterns_of(
        self, tenant: str, dialect: str, subscribers: Iterable[str]
    ) -> dict[str, dict[int, str]]:
        """For each of ``subscribers``: id -> pattern of its subscriptions in ``dialect``
        (empty when it has none). One vectorized scan of the snapshot's columns for all of
        them (``Catalog.patterns_of``): no per-subscriber index is kept, as explain and
        redundancy are rare, operator-driven reads."""
        found = self._catalog.entries.patterns_of(tenant, dialect, subscribers)
        if self.expiry.next > time():
            return found
        due = self.expiry.due(time())
        return {
            name: {i: p for i, p in held.items() if i not in due} for name, held in found.items()
        }

    def related(
        self,
        tenant: str,
        dialect: str,
        pattern: str,
        relation: Relation,
        after: int | None = None,
        limit: int = 100,
        budget: Budget | None = None,
    ) -> Found:
        """Ids of ``tenant``'s subscriptions in ``dialect``, in id order after ``after``, at
        most ``limit``, whose pattern overlaps ``pattern`` or is covered by it, and where to
        resume (``matcher.overlap.search``: pruned by ``optimized_inverted_bitmap``'s rows when
        that engine is built, which it is by default; the group members a route stands for
        go by its pattern). Raises the matcher's errors for an invalid pattern, even with no
        subscription. ``budget``: the search's (see ``search``)."""
        matchers = self._topic.get((tenant, dialect))
        if matchers is None:
            empty = validator(dialect, self.limits)
            empty.dialect.parse_pattern(pattern, empty.limits)
            return Found([], None)
        engine = matchers.get("optimized_inverted_bitmap", matchers[self._primary])
        aliases = {
            member: found.route
            for found in self.groups.classes((tenant, dialect))
            for member in found.ring.ids
            if member != found.route
        }
        found = search(engine, pattern, relation, after, limit, aliases=aliases, budget=budget)
        if self.expiry.next > time():
            return found
        due = self.expiry.due(time())
        return Found([i for i in found.ids if i not in due], found.resume)
