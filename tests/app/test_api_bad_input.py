"""Bad input, on both backends: each refusal is a 4xx in the ``{"error": {"code",
"message"}}`` envelope naming the rule, never a 500, and the service keeps serving (its
seeded subscription still matches after every refusal)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from harness.services import reset_postgres
from tests.app.conftest import (
    A_HEADERS,
    ADMIN_HEADERS,
    make_settings,
    match_ids,
)

MAX_BODY = 16_384
MAX_BATCH = 5
QUOTA = 3
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Seeded:
    client: TestClient
    seed_id: int


@pytest.fixture(scope="module", params=["postgres", "duckdb"])
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seeded]:
    """One app per backend for the whole table (refusals change nothing), with small limits;
    one subscription to check it still serves, and tenant ``full`` at its quota."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        reset_postgres(url)
    else:
        url = f"duckdb:///{tmp_path_factory.mktemp('bad-input') / 'bad.duckdb'}"
    settings = make_settings(url, max_body_bytes=MAX_BODY, max_batch=MAX_BATCH, tenant_quota=QUOTA)
    with TestClient(create_app(settings, wait_until_ready=True)) as client:
        seed = client.post(
            "/v1/subscriptions",
            json={"subscriber": "seed", "pattern": "seed.#"},
            headers=ADMIN_HEADERS,
        )
        assert seed.status_code == 201, seed.text
        for i in range(QUOTA):
            full = client.post(
                "/v1/subscriptions",
                json={"subscriber": "s", "pattern": f"full.{i}", "tenant": "full"},
                headers=ADMIN_HEADERS,
            )
            assert full.status_code == 201, full.text
        yield Seeded(client, seed.json()["id"])


Body = bytes | Callable[[], Iterator[bytes]]


@dataclass(frozen=True)
class Bad:
    """One bad request and the refusal it must get."""

    method: str
    path: str
    status: int
    code: str
    json: Any = None
    content: Body | None = None  # raw bytes (sent as JSON), or a generator: chunked
    params: dict[str, str] | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(ADMIN_HEADERS))


def sub(**fields: Any) -> dict[str, Any]:
    return {"subscriber": "q", "pattern": "p", **fields}


def _chunked_over_the_limit() -> Iterator[bytes]:
    """A JSON body sent in pieces without Content-Length, twice the limit in all."""
    yield b'{"topic": "'
    for _ in range(2 * MAX_BODY // 1024):
        yield b"a" * 1024
    yield b'"}'


NO_TOKEN: dict[str, str] = {}
LONG_LABELS = {"a": "x" * 2500, "b": "y" * 2500}  # each string fine, 5000 bytes of JSON
DEEP_LABELS: dict[str, Any] = {"l": "leaf"}
for _ in range(9):
    DEEP_LABELS = {"l": DEEP_LABELS}

CASES: dict[str, Bad] = {
    # -- text: NUL, lone surrogates, invalid UTF-8 --------------------------------------
    "nul in topic": Bad("POST", "/v1/match", 400, "nul_byte", content=b'{"topic": "a\\u0000b"}'),
    "nul in pattern": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "nul_byte",
        content=b'{"subscriber": "q", "pattern": "a\\u0000"}',
    ),
    "nul in subscriber": Bad(
        "POST", "/v1/subscriptions", 400, "nul_byte", json=sub(subscriber="q\x00")
    ),
    "nul in tenant": Bad("POST", "/v1/subscriptions", 400, "nul_byte", json=sub(tenant="t\x00")),
    "lone surrogate in topic": Bad(
        "POST", "/v1/match", 400, "lone_surrogate", content=b'{"topic": "a\\ud800"}'
    ),
    "lone surrogate in pattern": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "lone_surrogate",
        content=b'{"subscriber": "q", "pattern": "\\udfff.a"}',
    ),
    "lone surrogate in subscriber": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "lone_surrogate",
        content=b'{"subscriber": "q\\ud800", "pattern": "a"}',
    ),
    "invalid utf-8 bytes in a JSON body": Bad(
        "POST", "/v1/match", 400, "invalid_utf8", content=b'{"topic": "a\xff\xfeb"}'
    ),
    "invalid utf-8 bytes in a subscription": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "invalid_utf8",
        content=b'{"subscriber": "q", "pattern": "caf\xe9"}',  # Latin-1, not UTF-8
    ),
    "%FF in the query string": Bad("GET", "/v1/match?topic=a.%FF", 400, "invalid_utf8"),
    "%00 in the query string": Bad("GET", "/v1/match?topic=a%00b", 400, "nul_byte"),
    "encoded surrogate in the query string": Bad(
        "GET", "/v1/match?topic=%ED%A0%80", 400, "invalid_utf8"
    ),
    "%FF in a listing filter": Bad("GET", "/v1/subscriptions?subscriber=%FF", 400, "invalid_utf8"),
    "invalid utf-8 in a path segment": Bad(
        "DELETE", "/v1/subscribers/q%C3%28/subscriptions", 400, "invalid_utf8"
    ),
    "nul in a path segment": Bad("DELETE", "/v1/subscribers/q%00/subscriptions", 400, "nul_byte"),
    # -- limits of the matcher --------------------------------------------------------
    "topic over 255 bytes": Bad(
        "POST", "/v1/match", 400, "topic_too_long", json={"topic": "a" * 256}
    ),
    "topic over 255 bytes by query": Bad(
        "GET", "/v1/match", 400, "topic_too_long", params={"topic": "a." * 128}
    ),
    "pattern over 255 bytes": Bad(
        "POST", "/v1/subscriptions", 400, "pattern_too_long", json=sub(pattern="a" * 256)
    ),
    "multi-byte topic: 128 characters, 256 bytes": Bad(
        "POST", "/v1/match", 400, "topic_too_long", json={"topic": "é" * 128}
    ),
    "multi-byte pattern: 86 characters, 258 bytes": Bad(
        "POST", "/v1/subscriptions", 400, "pattern_too_long", json=sub(pattern="€" * 86)
    ),
    # -- grammar of the dialects ------------------------------------------------------
    "mqtt a/#/b": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "invalid_wildcard",
        json=sub(pattern="a/#/b", dialect="mqtt"),
    ),
    "mqtt a+": Bad(
        "POST", "/v1/subscriptions", 400, "invalid_wildcard", json=sub(pattern="a+", dialect="mqtt")
    ),
    "mqtt empty filter": Bad(
        "POST", "/v1/subscriptions", 400, "empty_pattern", json=sub(pattern="", dialect="mqtt")
    ),
    "mqtt wildcard in a topic": Bad(
        "POST", "/v1/match", 400, "wildcard_in_topic", json={"topic": "a/+", "dialect": "mqtt"}
    ),
    "nats a..b": Bad(
        "POST", "/v1/subscriptions", 400, "empty_word", json=sub(pattern="a..b", dialect="nats")
    ),
    "nats topic a..b": Bad(
        "GET", "/v1/match", 400, "empty_word", params={"topic": "a..b", "dialect": "nats"}
    ),
    # -- the request's shape ----------------------------------------------------------
    "unknown dialect": Bad(
        "POST", "/v1/subscriptions", 422, "invalid_request", json=sub(dialect="stomp")
    ),
    "unknown dialect by query": Bad(
        "GET", "/v1/match", 422, "invalid_request", params={"topic": "a", "dialect": "stomp"}
    ),
    "unknown field": Bad("POST", "/v1/subscriptions", 422, "invalid_request", json=sub(queue="x")),
    "unknown field in match": Bad(
        "POST", "/v1/match", 422, "invalid_request", json={"topic": "a", "limit": 1}
    ),
    "subscriber is a number": Bad(
        "POST", "/v1/subscriptions", 422, "invalid_request", json=sub(subscriber=7)
    ),
    "topics is a string": Bad(
        "POST", "/v1/match/batch", 422, "invalid_request", json={"topics": "a.b"}
    ),
    "header value is a number": Bad(
        "POST", "/v1/match/headers", 422, "invalid_request", json={"headers": {"k": 1}}
    ),
    "body is an array": Bad("POST", "/v1/match", 422, "invalid_request", json=["a.b"]),
    "body is not JSON": Bad("POST", "/v1/match", 422, "invalid_request", content=b'{"topic": '),
    "missing body": Bad("POST", "/v1/match", 422, "invalid_request"),
    "missing topic": Bad("POST", "/v1/match", 422, "invalid_request", json={}),
    "NaN in labels (not JSON)": Bad(
        "POST",
        "/v1/subscriptions",
        422,
        "invalid_request",
        content=b'{"subscriber": "q", "pattern": "p", "labels": {"k": NaN}}',
    ),
    "1e400 in labels (no finite double)": Bad(
        "POST",
        "/v1/subscriptions",
        422,
        "invalid_request",
        content=b'{"subscriber": "q", "pattern": "p", "labels": {"k": [1e400]}}',
    ),
    "JSON nested 6,000 deep": Bad(
        "POST", "/v1/match", 400, "json_too_deep", content=b"[" * 6000 + b"]" * 6000
    ),
    "integer of 5,000 digits": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "invalid_json",
        content=b'{"subscriber": "q", "pattern": "p", "labels": {"n": ' + b"9" * 5000 + b"}}",
    ),
    "id over 2**32 - 1 in the path": Bad(
        "GET", "/v1/subscriptions/4294967296", 422, "invalid_request"
    ),
    "negative id in the path": Bad("DELETE", "/v1/subscriptions/-1", 422, "invalid_request"),
    "id not a number": Bad("GET", "/v1/subscriptions/seven", 422, "invalid_request"),
    "page limit 0": Bad("GET", "/v1/subscriptions?limit=0", 422, "invalid_request"),
    "page after over 2**32 - 1": Bad(
        "GET", "/v1/subscriptions?after=4294967296", 422, "invalid_request"
    ),
    "no such route": Bad("GET", "/v1/nothing", 404, "not_found"),
    "no such method": Bad("PUT", "/v1/match", 405, "method_not_allowed"),
    # -- size limits ------------------------------------------------------------------
    "body over the limit, with Content-Length": Bad(
        "POST", "/v1/match", 413, "body_too_large", json={"topic": "a" * (MAX_BODY + 1)}
    ),
    "body over the limit, chunked": Bad(
        "POST", "/v1/match", 413, "body_too_large", content=_chunked_over_the_limit
    ),
    "batch over max_batch": Bad(
        "POST", "/v1/match/batch", 413, "batch_too_large", json={"topics": ["a"] * (MAX_BATCH + 1)}
    ),
    "bulk over max_batch": Bad(
        "POST",
        "/v1/subscriptions/bulk",
        413,
        "batch_too_large",
        json={"items": [sub(pattern=f"b.{i}") for i in range(MAX_BATCH + 1)]},
    ),
    # -- who is calling ---------------------------------------------------------------
    "no token": Bad(
        "POST", "/v1/match", 401, "unauthorized", json={"topic": "a"}, headers=NO_TOKEN
    ),
    "no token on an admin route": Bad(
        "GET", "/v1/subscriptions", 401, "unauthorized", headers=NO_TOKEN
    ),
    "unknown token": Bad(
        "GET", "/v1/subscriptions", 401, "unauthorized", headers={"Authorization": "Bearer nope"}
    ),
    "not a bearer token": Bad(
        "GET",
        "/v1/subscriptions",
        401,
        "unauthorized",
        headers={"Authorization": f"Basic {ADMIN_HEADERS['Authorization'][7:]}"},
    ),
    "tenant token naming another tenant": Bad(
        "POST",
        "/v1/subscriptions",
        403,
        "wrong_tenant",
        json=sub(tenant="globex"),
        headers=A_HEADERS,
    ),
    "tenant token matching in another tenant": Bad(
        "GET",
        "/v1/match",
        403,
        "wrong_tenant",
        params={"topic": "a", "tenant": "globex"},
        headers=A_HEADERS,
    ),
    "quota exceeded": Bad(
        "POST", "/v1/subscriptions", 403, "quota_exceeded", json=sub(tenant="full")
    ),
    "quota exceeded by a bulk": Bad(
        "POST",
        "/v1/subscriptions/bulk",
        403,
        "quota_exceeded",
        json={"items": [sub(tenant="full")]},
    ),
    # -- labels, names and headers subscriptions --------------------------------------
    "nul in a label value": Bad(
        "POST", "/v1/subscriptions", 400, "nul_byte", json=sub(labels={"k": "a\x00b"})
    ),
    "nul in a label key": Bad(
        "POST", "/v1/subscriptions", 400, "nul_byte", json=sub(labels={"k\x00": "v"})
    ),
    "nul deep in labels": Bad(
        "POST", "/v1/subscriptions", 400, "nul_byte", json=sub(labels={"k": [{"x": ["\x00"]}]})
    ),
    "lone surrogate in labels": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "lone_surrogate",
        content=b'{"subscriber": "q", "pattern": "p", "labels": {"k": "\\ud800"}}',
    ),
    "labels too large": Bad(
        "POST", "/v1/subscriptions", 400, "labels_too_large", json=sub(labels=LONG_LABELS)
    ),
    "one label too long": Bad(
        "POST", "/v1/subscriptions", 400, "label_too_long", json=sub(labels={"k": "v" * 5000})
    ),
    "labels too deep": Bad(
        "POST", "/v1/subscriptions", 400, "labels_too_deep", json=sub(labels=DEEP_LABELS)
    ),
    "subscriber empty": Bad(
        "POST", "/v1/subscriptions", 400, "empty_subscriber", json=sub(subscriber="")
    ),
    "subscriber over 255 bytes": Bad(
        "POST", "/v1/subscriptions", 400, "subscriber_too_long", json=sub(subscriber="ü" * 128)
    ),
    "tenant over 255 bytes": Bad(
        "POST", "/v1/subscriptions", 400, "tenant_too_long", json=sub(tenant="t" * 256)
    ),
    "headers subscription without criteria": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "missing_criteria",
        json=sub(pattern="", kind="headers", mode="all"),
    ),
    "headers subscription with no criterion": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "no_criteria",
        json=sub(pattern="", kind="headers", mode="all", criteria={}),
    ),
    "header criterion value with NUL": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "nul_byte",
        json=sub(pattern="", kind="headers", mode="any", criteria={"k": "a\x00"}),
    ),
    "header criterion field with a lone surrogate": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "lone_surrogate",
        content=b'{"subscriber": "q", "kind": "headers", "mode": "all",'
        b' "criteria": {"\\udc00": null}}',
    ),
    "message header with NUL": Bad(
        "POST", "/v1/match/headers", 400, "nul_byte", json={"headers": {"k": "\x00"}}
    ),
    "headers subscription with a pattern": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "pattern_not_applicable",
        json=sub(kind="headers", mode="all", criteria={"k": None}),
    ),
    "headers subscription with a dialect": Bad(
        "POST",
        "/v1/subscriptions",
        400,
        "dialect_not_applicable",
        json={
            "subscriber": "q",
            "kind": "headers",
            "mode": "all",
            "criteria": {"k": None},
            "dialect": "mqtt",
        },
    ),
    "topic subscription with criteria": Bad(
        "POST", "/v1/subscriptions", 400, "criteria_not_applicable", json=sub(criteria={"k": "v"})
    ),
    "topic subscription with a mode": Bad(
        "POST", "/v1/subscriptions", 400, "mode_not_applicable", json=sub(mode="any")
    ),
    "newline in a subscriber": Bad(
        "POST", "/v1/subscriptions", 400, "control_character", json=sub(subscriber="q\nr")
    ),
    "escape in a pattern": Bad(
        "POST", "/v1/subscriptions", 400, "control_character", json=sub(pattern="a.\x1b[31m")
    ),
    "headers mode unknown": Bad(
        "POST",
        "/v1/subscriptions",
        422,
        "invalid_request",
        json=sub(pattern="", kind="headers", mode="most", criteria={"k": None}),
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input_is_refused_with_its_code_and_the_service_keeps_serving(
    seeded: Seeded, case: Bad
) -> None:
    client = seeded.client
    headers = dict(case.headers)
    content: Any = None
    if callable(case.content):
        content = case.content()
    elif case.content is not None:
        content = case.content
        headers.update(JSON)
    response = client.request(
        case.method, case.path, json=case.json, content=content, params=case.params, headers=headers
    )
    assert (response.status_code, response.headers["content-type"]) == (
        case.status,
        "application/json",
    ), response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == case.code, error
    assert isinstance(error["message"], str) and error["message"], error
    if case.status == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    if callable(case.content):
        assert "content-length" not in response.request.headers  # it really was chunked

    assert client.get("/healthz").status_code == 200
    assert match_ids(client, "seed.still.serving") == [seeded.seed_id]


def test_refusals_stored_nothing(seeded: Seeded) -> None:
    """Run after the table (file order): only the seeded subscriptions exist."""
    client = seeded.client
    counts = {
        tenant: client.get(
            "/v1/subscriptions-count", params={"tenant": tenant}, headers=ADMIN_HEADERS
        ).json()["total"]
        for tenant in ("default", "full", "acme", "globex")
    }
    assert counts == {"default": 1, "full": QUOTA, "acme": 0, "globex": 0}


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 30
    assert {case.status for case in CASES.values()} >= {400, 401, 403, 404, 405, 413, 422}


def test_a_bulk_reports_bad_text_per_item(seeded: Seeded) -> None:
    """Inside a bulk, the same rules give per-item errors and the rest is stored."""
    items = [
        sub(subscriber="", pattern="x"),
        sub(pattern="a\x00"),
        sub(pattern="é" * 128),
        sub(labels={"k": "\x00"}),
        sub(subscriber="bulk-ok", pattern="seed.bulk"),
    ]
    response = seeded.client.post(
        "/v1/subscriptions/bulk", json={"items": items}, headers=ADMIN_HEADERS
    )
    assert response.status_code == 207, response.text
    results = response.json()["results"]
    assert [r.get("error") and r["error"]["code"] for r in results[:4]] == [
        "empty_subscriber",
        "nul_byte",
        "pattern_too_long",
        "nul_byte",
    ]
    created = results[4]["id"]
    assert match_ids(seeded.client, "seed.bulk") == sorted([seeded.seed_id, created])
    assert (
        seeded.client.delete(f"/v1/subscriptions/{created}", headers=ADMIN_HEADERS).status_code
        == 204
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/subscriptions", {"subscriber": "q", "pattern": "a.b"}),
        ("/v1/match", {"topic": "a.b"}),
        ("/v1/match/batch", {"topics": ["a.b"]}),
    ],
)
@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded"])
def test_a_json_body_without_its_content_type_is_told_so(
    seeded: Seeded, path: str, body: dict[str, Any], content_type: str | None
) -> None:
    """What curl sends for ``-d '{...}'`` without ``-H 'Content-Type: application/json'``."""
    headers = dict(ADMIN_HEADERS)
    if content_type:
        headers["content-type"] = content_type
    response = seeded.client.post(path, content=json.dumps(body).encode(), headers=headers)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert "Content-Type: application/json" in error["message"], error
    assert (content_type or "none") in error["message"]
    # the same body with the header is taken
    sent = seeded.client.post(path, json=body, headers=ADMIN_HEADERS)
    assert sent.status_code in (200, 201), sent.text
