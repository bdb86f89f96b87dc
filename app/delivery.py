"""A match's answer as the API shows it (``MatchOut``, and each item of ``BatchOut``'s
``results``), built in one place for the match routes and the command line's direct mode:
``delivery`` for one match, ``batch`` for the JSON of many. Each counts what it delivers in
the ``MatchCounts`` it is given (``app.stats``): the delivered ids, so a group's chosen
member, not every member its route stands for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app._answers import MatchCounts, encode_answers
from loader import RoutingTable
from matcher import MatcherError, MatchResult
from matcher.budget import Budget
from matcher.groups import InvalidGroupError, check_key


def hash_key(key: str | None, default: str) -> str:
    """The ``hash`` policy's key of a request: ``key`` when it gave one, bounded
    (``matcher.groups.check_key``: 1,024 UTF-8 bytes, no NUL; ``InvalidGroupError``)
    whether or not a group matches, else ``default`` (the topic)."""
    return default if key is None else check_key(key)


def check_keys(keys: Sequence[str] | None) -> None:
    """``hash_key``'s bound on each of a batch's ``keys``; the error names the index."""
    for i, key in enumerate(keys or ()):
        try:
            check_key(key)
        except InvalidGroupError as e:
            raise InvalidGroupError(e.code, f"keys[{i}]: {e.message}") from e


def delivery(
    table: RoutingTable,
    tenant: str,
    ids: MatchResult,
    key: str,
    delivered: MatchCounts | None = None,
) -> dict[str, Any]:
    """The delivered set of one match (``ids``: ``RoutingTable.routes``): ungrouped ids
    plus one member per group (``RoutingTable.deliver``), with each group's choice, each
    counted in ``delivered``. A tenant without groups takes the path of a plain match: one
    dict lookup more than before groups existed."""
    answer = _answer(table, tenant, ids, key)[0]
    if delivered is not None:
        delivered.add(answer["subscriptions"], len(table.subscriber_names()[0]))
    return answer


def _answer(
    table: RoutingTable, tenant: str, ids: MatchResult, key: str
) -> tuple[dict[str, Any], int]:
    """``delivery``, and its work: the ids it holds plus the candidates the groups'
    choices examined."""
    if not table.groups.has_groups(tenant):
        answer = {"subscriptions": sorted(ids), "subscribers": table.subscribers(ids), "groups": []}
        return answer, len(ids)
    delivered, chosen, examined = table.deliver(tenant, ids, key)
    subscribers = table.subscribers(delivered)
    work = len(delivered) + examined
    if not chosen:
        return {"subscriptions": delivered, "subscribers": subscribers, "groups": []}, work
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
    return {"subscriptions": delivered, "subscribers": subscribers, "groups": groups}, work


def batch(
    table: RoutingTable,
    tenant: str,
    dialect: str,
    topics: Sequence[str],
    keys: Sequence[str] | None = None,
    budget: Budget | None = None,
    max_work: int | None = None,
    delivered: MatchCounts | None = None,
) -> tuple[bytes, int]:
    """The items of a batch answer's ``results`` array as JSON (comma-separated, without
    the brackets, so slices join with a comma), and the work they took: per topic
    ``delivery``'s answer (``keys[k]`` the ``hash`` policy's key, by default the topic;
    ``check_keys`` bounds them first) or, for a topic the dialect refuses, ``{"error":
    {"code", "message"}}``. The work is the ids in the answers plus, for a tenant with
    shared subscriptions, the candidates its groups' choices examined (``max_batch_matches``
    bounds it); past ``max_work`` the topics left are not matched (the caller refuses the
    batch). For a tenant without shared subscriptions, one ``RoutingTable.match_ids`` call
    and the JSON written in C from its arrays (``app._answers``: no Python object per topic
    or id; the same bytes as orjson of the dicts, ``tests/app/test_answers.py``). With
    groups, a topic at a time in Python, ``budget`` checked before each (a stop or its
    deadline ends the batch between two topics). Each answered id is counted in
    ``delivered`` (by the C encoder as it writes the id, without groups)."""
    if not table.groups.has_groups(tenant):
        counts, ids, errors = table.match_ids(tenant, dialect, topics)
        by_id, far = table.subscriber_names()
        return encode_answers(counts, ids, errors, by_id, far, delivered)
    results: list[dict[str, Any]] = []
    routes = table.routes
    append = results.append
    work = 0
    check = None if budget is None else budget.check
    for i, topic in enumerate(topics):
        if check is not None:
            check()
        try:
            found = routes(tenant, dialect, topic)
        except MatcherError as e:
            append({"error": {"code": e.code, "message": e.message}})
            continue
        answer, cost = _answer(table, tenant, found, topic if keys is None else keys[i])
        if delivered is not None:
            delivered.add(answer["subscriptions"], len(table.subscriber_names()[0]))
        append(answer)
        work += cost
        if max_work is not None and work > max_work:
            break
    return orjson.dumps(results)[1:-1], work
