"""Live match statistics of a serving process: what it delivers is counted in memory, and
added to the store in batches.

Counting: every delivered id (a single match's answer, each topic of a batch, a group's
chosen member; not an explain) is counted in ``MatchStats.counts``
(``app._answers.MatchCounts``: one 4-byte word per id in an array indexed by id; the batch
encoder counts a batch's ids in C, so a batch has no Python step per id).

Flushing: a thread drains the counts every ``TOPICSTORE_STATS_FLUSH_INTERVAL`` seconds and
adds them to ``subscription_stats`` (``store.stats``: ``matches = matches + delta``), so
each replica and worker adds its own and the row is their sum. A drain is atomic with
respect to counting (both hold the GIL), so no delivery is lost or counted twice between
two flushes. A flush that fails (the store is down) puts its counts back, to go with the
next one. The service's stop (SIGTERM) flushes once more; a process killed without it
loses at most one interval of counts.
"""

from __future__ import annotations

import logging
import threading
import time

from app._answers import MatchCounts
from store import Database
from store.stats import FLUSH_ROWS, Hot, add_counts, most_matched

log = logging.getLogger(__name__)


class MatchStats:
    """The process's match counts and their flusher (``top``: the most matched
    subscriptions ``most_matched`` reads)."""

    def __init__(self, db: Database, interval: float, top: int) -> None:
        self.db = db
        self.interval = interval
        self.top = top
        self.counts = MatchCounts()
        #: Flushes that wrote, their rows (ids; summed per id by the store), failed ones.
        self.flushes = 0
        self.flushed = 0
        self.failures = 0
        self._flushing = threading.Lock()  # the periodic flush and the final one
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hot: tuple[float, list[Hot]] = (float("-inf"), [])

    def start(self) -> None:
        """Start the flusher thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="topicstore-stats", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the flusher and flush what is left (the service's stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 10)
        try:
            self.flush()
        except Exception:  # the service is stopping: say what is lost, stop anyway
            log.exception("the last flush of the match statistics failed; their counts are lost")

    def flush(self) -> int:
        """Add the counts since the last flush to the store, ``FLUSH_ROWS`` ids per
        transaction; returns the ids written. On a failure, what was not written is put
        back and the error raised."""
        with self._flushing:
            ids, counts, lasts = self.counts.drain()
            for start in range(0, len(ids), FLUSH_ROWS):
                end = start + FLUSH_ROWS
                try:
                    with self.db.aside() as session:
                        add_counts(
                            session,
                            ids[start:end],
                            counts[start:end],
                            lasts[start:end],
                            postgres=self.db.is_postgres,
                        )
                except BaseException:
                    self.failures += 1
                    self.counts.restore(ids[start:], counts[start:], lasts[start:])
                    raise
            if ids:
                self.flushes += 1
                self.flushed += len(ids)
            return len(ids)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
            except Exception:  # entry point of a thread: the counts wait for the next one
                log.warning("flushing the match statistics failed; retrying", exc_info=True)

    def most_matched(self) -> list[Hot]:
        """The ``top`` most matched subscriptions in the store, read at most once per flush
        interval (the counts change no faster), so scrapes cost no more than that."""
        read_at, hot = self._hot
        now = time.monotonic()
        if self.top and now - read_at >= self.interval:
            with self.db.read() as session:
                hot = most_matched(session, self.top)
            self._hot = (now, hot)
        return hot
