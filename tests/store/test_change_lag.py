"""``SubscriptionRepository.change_lag``: the newest seq and the age of the oldest change
after a given one, by the database's clock (what ``/readyz`` bounds), on both backends."""

from __future__ import annotations

import time

from store import Database, NewSubscription, SubscriptionRepository


def test_change_lag_counts_from_the_oldest_unapplied_change(database: Database) -> None:
    db = database
    with db.read() as session:
        assert SubscriptionRepository(session).change_lag(0) == (0, 0.0)
    with db.write() as session:
        SubscriptionRepository(session).add_many([NewSubscription("s", "lag.a")])
    time.sleep(0.2)
    with db.write() as session:
        SubscriptionRepository(session).add_many([NewSubscription("s", "lag.b")])
    with db.read() as session:
        repo = SubscriptionRepository(session)
        newest, behind_both = repo.change_lag(0)
        _, behind_one = repo.change_lag(1)
        assert (newest, repo.change_lag(2)) == (2, (2, 0.0))
    # The first change is older than the second: the age is the oldest unapplied one's.
    assert behind_both >= 0.2 and behind_both > behind_one >= 0.0
