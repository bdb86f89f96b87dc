"""A match's answer as the API shows it (``MatchOut``), built in one place for the match
routes and the command line's direct mode."""

from __future__ import annotations

from typing import Any

from loader import RoutingTable
from matcher import MatchResult


def delivery(table: RoutingTable, tenant: str, ids: MatchResult, key: str) -> dict[str, Any]:
    """The delivered set of one match: ungrouped ids plus one member per group
    (``RoutingTable.deliver``), with each group's choice. A tenant without groups takes
    the path of a plain match: one dict lookup more than before groups existed."""
    if not table.groups.has_groups(tenant):
        return {"subscriptions": sorted(ids), "subscribers": table.subscribers(ids), "groups": []}
    delivered, chosen = table.deliver(tenant, ids, key)
    subscribers = table.subscribers(delivered)
    if not chosen:
        return {"subscriptions": delivered, "subscribers": subscribers, "groups": []}
    names = table.subscribers
    groups = [
        {
            "group": c.group,
            "policy": c.policy,
            "subscription": c.subscription,
            "subscriber": (names((c.subscription,)) or [""])[0],
            "candidates": c.candidates,
        }
        for c in chosen
    ]
    return {"subscriptions": delivered, "subscribers": subscribers, "groups": groups}
