"""A match's answer as the API shows it (``MatchOut``, and each item of ``BatchOut``'s
``results``), built in one place for the match routes and the command line's direct mode:
``delivery`` for one match, ``batch`` for the JSON of many."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app._answers import encode_answers
from loader import RoutingTable
from matcher import MatcherError, MatchResult
from matcher.budget import Budget


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


def batch(
    table: RoutingTable,
    tenant: str,
    dialect: str,
    topics: Sequence[str],
    keys: Sequence[str] | None = None,
    budget: Budget | None = None,
) -> tuple[bytes, int]:
    """The items of a batch answer's ``results`` array as JSON (comma-separated, without
    the brackets, so slices join with a comma), and how many matches they hold: per topic
    ``delivery``'s answer (``keys[k]`` the ``hash`` policy's key, by default the topic) or,
    for a topic the dialect refuses, ``{"error": {"code", "message"}}``. For a tenant
    without shared subscriptions, one ``RoutingTable.match_ids`` call and the JSON written
    in C from its arrays (``app._answers``: no Python object per topic or id; the same
    bytes as orjson of the dicts, ``tests/app/test_answers.py``). With groups, a topic at a
    time in Python, ``budget`` checked before each (a stop or its deadline ends the batch
    between two topics)."""
    if not table.groups.has_groups(tenant):
        counts, ids, errors = table.match_ids(tenant, dialect, topics)
        by_id, far = table.subscriber_names()
        return encode_answers(counts, ids, errors, by_id, far)
    results: list[dict[str, Any]] = []
    match = table.match
    append = results.append
    matched = 0
    check = None if budget is None else budget.check
    for i, topic in enumerate(topics):
        if check is not None:
            check()
        try:
            found = match(tenant, dialect, topic)
            answer = delivery(table, tenant, found, topic if keys is None else keys[i])
        except MatcherError as e:
            append({"error": {"code": e.code, "message": e.message}})
        else:
            matched += len(answer["subscriptions"])
            append(answer)
    return orjson.dumps(results)[1:-1], matched
