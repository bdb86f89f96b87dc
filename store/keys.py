"""Names the write path's modules share: where a write transaction's session keeps what
its statements hand to the commit, and the doorbell's channel.

Their own module so that the transaction (``store.db``) can call the code that writes
before the commit (``store.pending``), which needs them, without an import cycle."""

from __future__ import annotations

from typing import Final

#: PostgreSQL channel whose payload is the newest change seq (a doorbell, not the data).
CHANGES_CHANNEL: Final = "topicstore_changes"
#: Where a committed transaction's session keeps its changes, in seq order, when they are
#: all it logged (``store.pending``): the after-commit hooks get them.
COMMITTED: Final = "topicstore.committed"
#: Where a write transaction's session keeps a callable that ``store.pending`` calls with
#: the newest seq of the changes it is about to commit (``Database.committing_seq``).
COMMITTING: Final = "topicstore.committing"
