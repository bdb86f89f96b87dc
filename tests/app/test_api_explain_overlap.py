"""Explain, overlap search and redundancy through the API (TestClient on PostgreSQL and
DuckDB) and the command line (direct on the store, then over HTTP to a real ``topicstore
serve``: the same answers). Expected values are written by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.cli import app
from app.settings import get_settings
from tests.app.conftest import (
    A_HEADERS,
    ADMIN,
    ADMIN_HEADERS,
    B_HEADERS,
    ServerFactory,
    create,
)
from tests.app.test_api_server import settings_for

#: (subscriber, pattern, dialect) created in this order: ids 1.. in this order per test.
SUBSCRIPTIONS = [
    ("q1", "stock.*.msft", "amqp"),
    ("q1", "stock.#", "amqp"),
    ("q2", "stock.nyse.#", "amqp"),
    ("q1", "stock.nasdaq.msft", "amqp"),
    ("q3", "#.msft", "amqp"),
    ("m1", "sensors/+/temp", "mqtt"),
    ("m1", "sensors/#", "mqtt"),
    ("n1", "orders.>", "nats"),
]


def _seed(client: TestClient) -> dict[str, int]:
    """Creates SUBSCRIPTIONS for acme, plus one of globex that every query would match."""
    ids = {}
    for subscriber, pattern, dialect in SUBSCRIPTIONS:
        row = create(client, subscriber, pattern, A_HEADERS, dialect=dialect)
        ids[pattern] = row["id"]
    create(client, "other", "#", B_HEADERS)
    return ids


def _get(client: TestClient, path: str, headers: dict[str, str] = A_HEADERS, **params: Any) -> Any:
    response = client.get(path, params=params, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _error(client: TestClient, path: str, status: int, **params: Any) -> str:
    response = client.get(path, params=params, headers=A_HEADERS)
    assert response.status_code == status, response.text
    code: str = response.json()["error"]["code"]
    return code


def test_explain_says_what_each_wildcard_took(client: TestClient) -> None:
    ids = _seed(client)
    body = _get(
        client, "/v1/match/explain", topic="stock.nasdaq.msft", subscriber=["q2", "q1", "nobody"]
    )
    assert body["words"] == ["stock", "nasdaq", "msft"]
    assert body["matched_total"] == 4 and body["truncated"] is False
    got = {m["pattern"]: (m["id"], m["subscriber"], m["captures"]) for m in body["matched"]}
    star = {"token": 1, "wildcard": "*", "start": 1, "words": ["nasdaq"]}
    assert got == {
        "stock.*.msft": (ids["stock.*.msft"], "q1", [star]),
        "stock.#": (
            ids["stock.#"],
            "q1",
            [{"token": 1, "wildcard": "#", "start": 1, "words": ["nasdaq", "msft"]}],
        ),
        "stock.nasdaq.msft": (ids["stock.nasdaq.msft"], "q1", []),
        "#.msft": (
            ids["#.msft"],
            "q3",
            [{"token": 0, "wildcard": "#", "start": 0, "words": ["stock", "nasdaq"]}],
        ),
    }  # globex's '#' is not the caller's: not shown
    assert body["unmatched"] == [  # q1 matched: not listed
        {
            "subscriber": "q2",
            "patterns": 1,
            "closest": {
                "id": ids["stock.nyse.#"],
                "pattern": "stock.nyse.#",
                "failure": {"position": 1, "reason": "mismatch", "expected": ["nyse"]},
            },
        },
        {"subscriber": "nobody", "patterns": 0, "closest": None},
    ]


def test_explain_in_mqtt_and_nats(client: TestClient) -> None:
    ids = _seed(client)
    mqtt = _get(client, "/v1/match/explain", topic="sensors/kitchen", dialect="mqtt")
    assert mqtt["words"] == ["sensors", "kitchen"]
    assert mqtt["matched"] == [
        {
            "id": ids["sensors/#"],
            "subscriber": "m1",
            "pattern": "sensors/#",
            "captures": [{"token": 1, "wildcard": "#", "start": 1, "words": ["kitchen"]}],
        }
    ]
    system = _get(client, "/v1/match/explain", topic="$SYS/x", dialect="mqtt", subscriber="m1")
    assert system["matched"] == []
    failure = system["unmatched"][0]["closest"]["failure"]
    assert failure == {"position": 0, "reason": "mismatch", "expected": ["sensors"]}
    nats = _get(client, "/v1/match/explain", topic="orders", dialect="nats", subscriber="n1")
    assert nats["unmatched"][0]["closest"]["failure"]["reason"] == "too_short"


def test_explain_refuses_bad_input_in_the_envelope(client: TestClient) -> None:
    assert _error(client, "/v1/match/explain", 400, topic="a\x00b") == "nul_byte"
    assert _error(client, "/v1/match/explain", 400, topic="a/+", dialect="mqtt") == (
        "wildcard_in_topic"
    )
    names = [f"s{i}" for i in range(21)]
    assert _error(client, "/v1/match/explain", 422, topic="a", subscriber=names) == (
        "invalid_request"
    )
    other = client.get(
        "/v1/match/explain", params={"topic": "a", "tenant": "globex"}, headers=A_HEADERS
    )
    assert other.status_code == 403


def _listed(client: TestClient, headers: dict[str, str] = A_HEADERS, **params: Any) -> list[str]:
    return [row["pattern"] for row in _get(client, "/v1/subscriptions", headers, **params)["items"]]


def test_overlaps_and_covered_by(client: TestClient) -> None:
    _seed(client)
    # stock.nyse.msft is a topic of all but stock.nasdaq.msft
    assert _listed(client, overlaps="stock.nyse.*") == [
        "stock.*.msft",
        "stock.#",
        "stock.nyse.#",
        "#.msft",
    ]
    assert _listed(client, overlaps="#.ibm") == ["stock.#", "stock.nyse.#"]
    assert _listed(client, overlaps="*.*.msft") == [
        "stock.*.msft",
        "stock.#",
        "stock.nyse.#",
        "stock.nasdaq.msft",
        "#.msft",
    ]
    assert _listed(client, covered_by="stock.*.msft") == ["stock.*.msft", "stock.nasdaq.msft"]
    assert _listed(client, covered_by="#") == [
        "stock.*.msft",
        "stock.#",
        "stock.nyse.#",
        "stock.nasdaq.msft",
        "#.msft",
    ]
    assert _listed(client, covered_by="sensors/+/#", dialect="mqtt") == ["sensors/+/temp"]
    assert _listed(client, overlaps="$SYS/#", dialect="mqtt") == []
    assert _listed(client, overlaps="orders.new", dialect="nats") == ["orders.>"]
    assert _listed(client, overlaps="#", subscriber="q2") == ["stock.nyse.#"]
    # the operator names the tenant; globex's '#' overlaps everything
    assert _listed(client, ADMIN_HEADERS, overlaps="x", tenant="globex") == ["#"]


def test_overlap_pages_follow_the_keyset(client: TestClient) -> None:
    _seed(client)
    seen: list[str] = []
    after = None
    while True:
        params: dict[str, Any] = {"covered_by": "#", "limit": 2}
        if after is not None:
            params["after"] = after
        page = _get(client, "/v1/subscriptions", **params)
        seen += [row["pattern"] for row in page["items"]]
        after = page["next_after"]
        if after is None:
            break
    assert seen == ["stock.*.msft", "stock.#", "stock.nyse.#", "stock.nasdaq.msft", "#.msft"]


def test_overlap_search_refuses_bad_input(client: TestClient) -> None:
    _seed(client)
    path = "/v1/subscriptions"
    assert _error(client, path, 422, overlaps="a", covered_by="b") == "conflicting_filters"
    assert _error(client, path, 400, overlaps="a/#/b", dialect="mqtt") == "invalid_wildcard"
    assert _error(client, path, 400, overlaps="a", dialect="headers") == "invalid_dialect"
    # the listing's dialect is an enum in the OpenAPI document: FastAPI refuses it first
    assert _error(client, path, 422, overlaps="a", dialect="nope") == "invalid_request"
    assert _error(client, path, 400, covered_by="a" * 300) == "pattern_too_long"
    # a valid pattern in a dialect the tenant has nothing in: an empty page, not an error
    assert _listed(client, B_HEADERS, overlaps="a/b", dialect="mqtt") == []


def test_redundant(client: TestClient) -> None:
    ids = _seed(client)
    body = _get(client, "/v1/subscribers/q1/redundant")
    assert body == {
        "tenant": "acme",
        "subscriber": "q1",
        "dialect": "amqp",
        "patterns": 3,
        "redundant": [
            {
                "id": ids["stock.*.msft"],
                "pattern": "stock.*.msft",
                "covered_by": ids["stock.#"],
                "covered_by_pattern": "stock.#",
            },
            {
                "id": ids["stock.nasdaq.msft"],
                "pattern": "stock.nasdaq.msft",
                "covered_by": ids["stock.*.msft"],
                "covered_by_pattern": "stock.*.msft",
            },
        ],
    }
    mqtt = _get(client, "/v1/subscribers/m1/redundant", dialect="mqtt")
    assert [r["pattern"] for r in mqtt["redundant"]] == ["sensors/+/temp"]
    # equivalent spellings count once: the lower id stays
    first = create(client, "q9", "*.#", A_HEADERS)
    second = create(client, "q9", "#.*", A_HEADERS)
    q9 = _get(client, "/v1/subscribers/q9/redundant")["redundant"]
    assert [(r["id"], r["covered_by"]) for r in q9] == [(second["id"], first["id"])]
    # after the covering one is gone, nothing of q1 is covered by 'stock.#' any more
    assert (
        client.delete(f"/v1/subscriptions/{ids['stock.#']}", headers=A_HEADERS).status_code == 204
    )
    q1 = _get(client, "/v1/subscribers/q1/redundant")["redundant"]
    assert [r["pattern"] for r in q1] == ["stock.nasdaq.msft"]
    assert _get(client, "/v1/subscribers/nobody/redundant")["patterns"] == 0
    refused = client.get(
        "/v1/subscribers/q1/redundant", params={"tenant": "globex"}, headers=A_HEADERS
    )
    assert refused.status_code == 403


# -- the command line ---------------------------------------------------------------------


def _cli(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, args)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    return result.output


_QUERIES = [
    ["match", "stock.nasdaq.msft", "--explain", "--subscriber", "q2", "--json"],
    ["sub", "ls", "--overlaps", "stock.nyse.ibm", "--json"],
    ["sub", "ls", "--covered-by", "stock.*.msft", "--json"],
    ["sub", "redundant", "q1", "--json"],
    ["sub", "ls", "--label", "team=x", "--json"],
    ["sub", "ls", "--group", "g", "--json"],
]


def test_cli_direct_and_over_http_agree(
    store_url: str, serve: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"TOPICSTORE_DATABASE_URL": store_url, "TOPICSTORE_ADMIN_TOKEN": ADMIN}
    for subscriber, pattern, dialect in SUBSCRIPTIONS:
        _cli(["sub", "add", subscriber, pattern, "--dialect", dialect], env, monkeypatch)
    _cli(["sub", "add", "lab", "lab.#", "--label", "team=x", "--group", "g"], env, monkeypatch)
    direct = [json.loads(_cli(args, env, monkeypatch)) for args in _QUERIES]
    explained, overlapping, covered, redundant, labelled, grouped = direct
    assert [r["subscriber"] for r in labelled] == [r["subscriber"] for r in grouped] == ["lab"]
    assert [m["pattern"] for m in explained["matched"]] == [
        "stock.*.msft",
        "stock.#",
        "stock.nasdaq.msft",
        "#.msft",
    ]
    assert explained["unmatched"][0]["closest"]["failure"]["expected"] == ["nyse"]
    assert [r["pattern"] for r in overlapping] == ["stock.#", "stock.nyse.#"]  # of stock.nyse.ibm
    assert [r["pattern"] for r in covered] == ["stock.*.msft", "stock.nasdaq.msft"]
    assert [r["pattern"] for r in redundant["redundant"]] == ["stock.*.msft", "stock.nasdaq.msft"]
    human = _cli(["match", "stock.nyse.ibm", "--explain", "--subscriber", "q3"], env, monkeypatch)
    assert "stock.# " in human and "# (pattern word 2) took nyse.ibm" in human
    assert "q3: no match; closest" in human
    assert "#.msft fails after the topic's last word (too_short" in human

    # A selection's removal, one request per TOPICSTORE_MAX_DELETE rows until none is left.
    doomed = [
        json.loads(
            _cli(["sub", "add", "z", f"z.{i}", "--label", f"t={i % 2}", "--json"], env, monkeypatch)
        )["id"]
        for i in range(4)
    ]
    env["TOPICSTORE_MAX_DELETE"] = "1"
    removed = _cli(["sub", "rm", "--label", "t=0", "--json"], env, monkeypatch)
    assert json.loads(removed) == {"deleted": doomed[::2], "more": False}

    server = serve(**settings_for(store_url, max_delete="1"))
    server.wait_until("/readyz", 200)
    over_http = [
        json.loads(_cli([*args, "--api", server.url], env, monkeypatch)) for args in _QUERIES
    ]
    assert over_http == direct
    removed = _cli(["sub", "rm", "--subscriber", "z", "--api", server.url], env, monkeypatch)
    assert removed == "removed 2 subscriptions\n"
    left = _cli(["sub", "ls", "--subscriber", "z", "--json", "--api", server.url], env, monkeypatch)
    assert json.loads(left) == []
