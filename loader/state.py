"""What the routing table holds (``RoutingTable``'s state): the engines per (tenant,
dialect) and per tenant's headers, the published catalog snapshot, the subscriber name
of each id and the shared-subscription index, with the look-ups every job on them shares
(a group's engines, the names)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from loader.catalog import Catalog
from loader.columns import Names
from loader.engines import SHADOW_MAX, engine_set, headers_matcher
from loader.expiry import ExpiryIndex
from loader.groups import GroupIndex
from loader.shadow import ShadowCheck
from matcher import CapacityError, HeadersMatcher, Limits, Matcher
from matcher.registry import DEFAULT_ENGINES

log = logging.getLogger(__name__)

#: Subscriber names are kept in a list indexed by id while ids stay below this many per
#: subscription (ids come from a sequence, so they are dense); sparser ids go to a dict.
DENSE_FACTOR: Final = 4
DENSE_SLACK: Final = 1 << 16


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every subscription as of change ``seq``; later changes never alter it."""

    seq: int
    entries: Catalog


class TableState:
    """What a ``RoutingTable`` holds (see there), with the subscriber-name list and the
    look-ups of a group's engines every job shares."""

    def __init__(
        self,
        engines: Sequence[str] = DEFAULT_ENGINES,
        limits: Limits | None = None,
        cache_size: int = 0,
        shadow: ShadowCheck | None = None,
        shadow_max: int = SHADOW_MAX,
    ) -> None:
        if not engines:
            raise ValueError("at least one engine is needed")
        self.engines = tuple(engines)
        self._primary = self.engines[0]
        self.shadow = shadow if len(self.engines) > 1 else None
        self.shadow_max = shadow_max
        self.limits = limits
        self.cache_size = cache_size
        self._topic: dict[tuple[str, str], dict[str, Matcher]] = {}
        self._headers: dict[str, HeadersMatcher] = {}
        self._names = Names()
        self._catalog = Snapshot(0, Catalog.empty(self._names))
        # Live subscriber name per id: set before the matchers learn of an id, cleared
        # after they forget it (the catalog's snapshot is the consistent view).
        self._by_id: list[str | None] = []
        self._far: dict[int, str] = {}
        self._apply_lock = threading.Lock()
        self.groups = GroupIndex()  # shared subscriptions (loader.groups)
        self.expiry = ExpiryIndex()  # what expires, and what has (loader.expiry)
        # Stored subscriptions an engine refused for a capacity (CapacityError), counted
        # each time: not served; the reconciler offers them again (see apply).
        self.refused = 0

    @property
    def seq(self) -> int:
        """The newest change applied."""
        return self._catalog.seq

    def snapshot(self) -> Snapshot:
        return self._catalog

    def __len__(self) -> int:
        return len(self._catalog.entries)

    def subscribers(self, ids: Iterable[int]) -> list[str]:
        """Distinct subscriber names of ``ids`` (those this table holds), sorted."""
        by_id, far = self._by_id, self._far
        size = len(by_id)
        names: set[str] = set()
        for i in ids:
            if type(i) is not int or i < 0:
                continue
            name = by_id[i] if i < size else None
            if name is None:
                name = far.get(i)
            if name is not None:
                names.add(name)
        return sorted(names)

    def _matchers(self, tenant: str, dialect: str, size: int = 1) -> dict[str, Matcher]:
        """(tenant, dialect)'s engines, made on its first subscriptions (``size`` of them)."""
        key = (tenant, dialect)
        matchers = self._topic.get(key)
        if matchers is None:
            matchers = self._topic[key] = self._engine_set(dialect, size)
        return matchers

    def _engine_set(self, dialect: str, size: int) -> dict[str, Matcher]:
        """A fresh set of this table's engines for ``dialect``, sized for ``size``
        subscriptions (``loader.engines.engine_set``)."""
        return engine_set(
            self.engines, dialect, self.limits, self.cache_size, size, self.shadow_max
        )

    def _headers_of(self, tenant: str) -> HeadersMatcher:
        """``tenant``'s headers matcher, made on its first subscription."""
        headers = self._headers.get(tenant)
        if headers is None:
            headers = self._headers[tenant] = headers_matcher()
        return headers

    def _refuse(self, ids: Sequence[int], error: CapacityError) -> None:
        """Count and log (one line) the ids an engine refused, ``error`` the last refusal."""
        self.refused += len(ids)
        log.error("%d subscription(s) not served, ids %s: %s", len(ids), _some(ids), error)

    def _set_subscriber(self, sub_id: int, name: str | None, count: int) -> None:
        by_id = self._by_id
        if sub_id < len(by_id):
            by_id[sub_id] = name
        elif name is not None and sub_id < DENSE_FACTOR * count + DENSE_SLACK:
            by_id.extend([None] * (sub_id + 1 - len(by_id)))
            by_id[sub_id] = name
            self._far.pop(sub_id, None)
            return
        if name is None:
            self._far.pop(sub_id, None)
        elif sub_id >= len(by_id):
            self._far[sub_id] = name


def _some(ids: Sequence[int], shown: int = 5) -> str:
    """The first ``shown`` of ``ids`` for a log line."""
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(map(str, ids[:shown])) + more
