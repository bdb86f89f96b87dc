"""Two independent algorithms checking each other in production: a sample of matches is
answered by every other engine of the routing table too, and disagreements are counted
(``/metrics``) and logged. The answering engine is unaffected: the check runs after it has
answered, on one match in ``every``.

A write applies to the engines one after another, so a match racing a write may see two
engines at different points; such samples are discarded (the table's seq moved, or a write
was in progress), never counted as disagreements.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class ShadowCheck:
    """Counts, kept across table rebuilds (the loader owns one and hands it to each table).

    ``seen`` is incremented without a lock: under concurrent readers the sample rate is
    approximate, which is all sampling needs.
    """

    def __init__(self, every: int) -> None:
        if every < 0:
            raise ValueError("every must be 0 (off) or positive")
        self.every = every
        self.seen = 0
        self.checks = 0
        self.disagreements = 0

    def due(self) -> bool:
        """Whether this match is one of the sample (O(1))."""
        if not self.every:
            return False
        self.seen += 1
        return self.seen % self.every == 0

    def due_among(self, n: int) -> range:
        """The positions (from 0) of the next ``n`` matches that are in the sample: ``due``
        for each of them, in O(1) (a batch of 1,000 topics called ``due`` 1,000 times)."""
        if not self.every:
            return range(0)
        first = self.seen
        self.seen += n
        # Match k of the n is the (first + k + 1)th: due when that is a multiple of every.
        return range(-(first + 1) % self.every, n, self.every)

    def record(self, wrong: list[str], topic: str, where: str) -> None:
        """Count one completed check; ``wrong`` names the engines that disagreed."""
        self.checks += 1
        if wrong:
            self.disagreements += 1
            log.error("engines disagree on %r (%s): %s", topic, where, ", ".join(wrong))
