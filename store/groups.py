"""Where a group's policy lives, and the rule for conflicts.

The policy is a column of each member (``subscription.group_policy``), not a table of its
own: then a subscription row, its change-log rows and an export each carry all a loader or
the Spark job needs (no second kind of change to follow, no join), and a group exists
exactly while it has members. The price is that members could disagree, so every write
path keeps them equal, here, once:

* the member that creates a (tenant, group) states its policy, or gets ``DEFAULT_POLICY``;
* a later member that states none inherits the group's policy; one that states another is
  refused (``group_policy_conflict``, 409), in a bulk write as that item's own error;
* to change a policy, remove the members and add them again (a group with no members is
  gone, and the next member creates it afresh).

Reading rows written elsewhere (the Spark job's subscriptions file), the first row of a
group fixes its policy and a disagreeing row is rejected with the same code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from matcher.groups import DEFAULT_POLICY, Policy
from store.errors import StoreError
from store.records import NewSubscription

GroupKey = tuple[str, str]


class GroupConflictError(StoreError):
    """A write that would split a group (policy) or move a subscription between groups."""


class GroupPolicies:
    """The policy of each (tenant, group) seen so far; ``known`` is what the store holds
    (``SubscriptionRepository.group_policies``)."""

    def __init__(self, known: Mapping[GroupKey, Policy] | None = None) -> None:
        self._policies: dict[GroupKey, Policy] = dict(known or {})

    def resolve(self, new: NewSubscription) -> NewSubscription:
        """``new`` (validated) with its group's policy, or ``GroupConflictError`` when it
        states another policy than the group has. The first member of a group fixes it."""
        if new.group is None:
            return new
        key = (new.tenant, new.group)
        policy = self._policies.get(key)
        if policy is None:
            policy = self._policies[key] = new.group_policy or DEFAULT_POLICY
        elif new.group_policy is not None and new.group_policy != policy:
            raise GroupConflictError(
                "group_policy_conflict",
                f"group {new.group!r} has policy {policy!r}, not {new.group_policy!r}: remove "
                "its members to change it",
            )
        return replace(new, group_policy=policy)


def check_same_group(new: NewSubscription, group: str | None) -> None:
    """A subscription that exists already (same tenant, subscriber, dialect and pattern) is
    only "the same one" when it is in the same group: a subscriber holds a pattern once,
    in one group or none. ``GroupConflictError`` otherwise."""
    if group != new.group:
        where = "in no group" if group is None else f"in group {group!r}"
        raise GroupConflictError(
            "subscription_in_other_group",
            f"this subscriber already holds this pattern {where}; remove it first",
        )
