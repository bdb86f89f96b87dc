"""Readiness with a bound: a replica is ready when its table is built, its listener is
alive and it is caught up *within* ``bound_s`` seconds, not when its lag is 0 at the
instant of a probe (under steady writes a change is always in flight for a millisecond or
two, and a probe that lands then saw "lag 1": 9.4% of probes at 25 writes/s).

Precisely, with ``bound_s`` (``TOPICSTORE_READY_MAX_LAG_SECONDS``):

* built: the first full build and catch-up finished;
* listening (PostgreSQL): the change listener completed a catch-up within the last
  ``bound_s`` seconds (it does one at every doorbell and at least every poll interval, so
  a listener that lost its connection and cannot get it back stops beating), or an applier
  is working through changes and applied a slice within the last ``bound_s`` seconds (the
  listener is then waiting for it, or is it: a mass removal takes longer than a beat);
* caught up: every committed change is applied, or the oldest one not yet applied is at
  most ``bound_s`` old by the database's clock (counted from its transaction's start), or
  at most ``BACKLOG_GRACE`` times that while an applier is making progress on the backlog.

So a healthy replica applying a big change stays ready (a load balancer must not pull every
replica at once because one subscriber with 100,000 subscriptions left), and one that is
stuck (no slice applied for ``bound_s``), disconnected, or far behind goes unready.

The store not answering is not ready too (the probe cannot tell whether it is behind).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from loader.loader import Loader
from store import UNAVAILABLE_ERRORS
from store.repository import SubscriptionRepository

#: How many times ``bound_s`` the oldest unapplied change may be while the replica is
#: making progress on its backlog (one that keeps falling behind goes unready).
BACKLOG_GRACE: Final = 6


@dataclass(frozen=True, slots=True)
class Readiness:
    """One probe's verdict. ``reason`` names what is missing (None when ready)."""

    ready: bool
    seq: int
    lag: int | None
    lag_seconds: float | None
    reason: str | None


def probe(loader: Loader, bound_s: float) -> Readiness:
    """The readiness of ``loader`` now: one store round trip (see the module docstring)."""
    seq = loader.table.seq
    if not loader.ready.is_set():
        return Readiness(False, seq, None, None, "building")
    try:
        with loader.db.read() as session:
            newest, age = SubscriptionRepository(session).change_lag(seq)
    except UNAVAILABLE_ERRORS:
        return Readiness(False, seq, None, None, "store_unavailable")
    lag = max(0, newest - seq)
    age = age if lag else 0.0
    now = time.monotonic()
    progress = loader.progress_beat
    progressing = loader.applying() and progress is not None and now - progress <= bound_s
    beat = loader.listener_beat
    stalled = beat is None or now - beat > bound_s
    if loader.db.is_postgres and stalled and not progressing:
        return Readiness(False, seq, lag, age, "listener_stalled")
    if age > (BACKLOG_GRACE * bound_s if progressing else bound_s):
        return Readiness(False, seq, lag, age, "behind")
    return Readiness(True, seq, lag, age, None)
