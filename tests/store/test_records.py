"""The store's records agree: a new subscription and a stored one or a change say the
same things about a subscription, with the same types."""

from __future__ import annotations

from dataclasses import fields
from typing import get_type_hints

from store.records import Change, NewSubscription, StoredSubscription, SubscriptionFields


def test_a_new_subscription_holds_the_shared_fields_and_its_labels() -> None:
    shared = get_type_hints(SubscriptionFields)
    new = get_type_hints(NewSubscription)
    assert set(new) == set(shared) | {"labels"}
    assert {name: new[name] for name in shared} == shared
    assert get_type_hints(StoredSubscription)["labels"] == new["labels"]


def test_a_change_takes_its_own_fields_then_the_subscription_s_in_order() -> None:
    """Positional construction (the store's hot reads build changes from row tuples)."""
    change = Change(7, "add", 3, "t", "s", "a.*", "amqp", "topic", None, None, "g", "hash")
    shared = [f.name for f in fields(SubscriptionFields)]
    assert [f.name for f in fields(change)] == ["seq", "op", "subscription_id", *shared]
    assert (change.seq, change.subscription_id, change.tenant, change.group) == (7, 3, "t", "g")
    assert change == Change(7, "add", 3, "t", "s", "a.*", "amqp", "topic", None, None, "g", "hash")
