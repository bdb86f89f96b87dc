"""The fast path of ``POST /v1/match`` and ``POST /v1/match/batch`` (``app.fastpath``) held
to the FastAPI routes it stands in for: two apps built alike, one with the fast path and one
without (the reference), get the same requests, good and bad (bodies, content types, tokens,
tenants, topics, request ids, rate limits, body limits), and must give byte-identical
answers: status, every header (the request id is sent, so it is fixed), the envelope; and
count them alike in ``/metrics`` (the route labels). A spy on the scope shows which requests
the fast path answered itself, so the comparison is not the route against itself."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.conftest import ADMIN, TOKEN_A, TOKEN_B
from tests.app.fast_twins import open_twins

REQUEST_ID = "fast-path-test-1"


@dataclass
class Pair:
    fast: TestClient
    reference: TestClient
    fast_spy: list[bool]
    reference_spy: list[bool]

    def both(
        self,
        content: bytes | list[bytes],
        headers: Mapping[str, str] | list[tuple[str, str]],
        path: str = "/v1/match",
    ) -> tuple[tuple[int, bytes], bool]:
        """Send the same request to both (a list of bytes: in chunks, without
        Content-Length); assert identical answers; return the answer (status, body) and
        whether the fast path answered it itself."""
        answers = []
        for client in (self.fast, self.reference):
            body = iter(content) if isinstance(content, list) else content
            response = client.post(path, content=body, headers=list(_items(headers)))
            answers.append((response.status_code, response.headers.multi_items(), response.content))
        assert answers[0] == answers[1], (content, headers)
        return (answers[0][0], answers[0][2]), not self.fast_spy[-1]

    def metrics(self) -> tuple[list[str], list[str]]:
        def lines(client: TestClient) -> list[str]:
            text = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
            return sorted(
                line
                for line in text.splitlines()
                if line.startswith(
                    ("topicstore_http_requests_total", "topicstore_http_request_seconds_count")
                )
            )

        return lines(self.fast), lines(self.reference)


def _items(headers: Mapping[str, str] | list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    yield ("X-Request-ID", REQUEST_ID)
    yield from headers.items() if isinstance(headers, Mapping) else headers


@pytest.fixture
def make_pair(tmp_path: Path) -> Iterator[Any]:
    """Two apps on their own DuckDB files with the same settings and the same
    subscriptions (created in the same order, so with the same ids)."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> Pair:
        def fill(client: TestClient) -> None:
            for subscriber, pattern, extra in SUBSCRIPTIONS:
                response = client.post(
                    "/v1/subscriptions",
                    json={"subscriber": subscriber, "pattern": pattern, **extra},
                    headers={"Authorization": f"Bearer {ADMIN}"},
                )
                assert response.status_code == 201, response.text

        clients, spies = open_twins(
            tmp_path,
            opened,
            lambda path: path in ("/v1/match", "/v1/match/batch"),
            fill,
            **overrides,
        )
        return Pair(clients[0], clients[1], spies[0], spies[1])

    yield make
    for client in opened:
        client.__exit__(None, None, None)


SUBSCRIPTIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("s1", "stock.*.msft", {"tenant": "acme"}),
    ("s2", "stock.#", {"tenant": "acme"}),
    ("s3", "stock.nasdaq.*", {"tenant": "globex"}),
    ("s4", "stock.#", {}),
    ("w1", "orders.*", {"tenant": "acme", "group": "workers", "group_policy": "hash"}),
    ("w2", "orders.*", {"tenant": "acme", "group": "workers"}),
    ("m1", "a/+/c", {"tenant": "acme", "dialect": "mqtt"}),
]

JSON = {"Content-Type": "application/json"}
A = {**JSON, "Authorization": f"Bearer {TOKEN_A}"}
B = {**JSON, "Authorization": f"Bearer {TOKEN_B}"}
OPERATOR = {**JSON, "Authorization": f"Bearer {ADMIN}"}

#: (body, headers, answered by the fast path itself): the fast path answers a valid JSON
#: body (whatever the auth, tenant or topic then says); every other body goes to the route.
CASES: list[tuple[bytes, Mapping[str, str] | list[tuple[str, str]], bool]] = [
    (b'{"topic": "stock.nasdaq.msft"}', A, True),
    (b'{"topic": "stock.nasdaq.msft"}', B, True),
    (b'{"topic": "stock.nasdaq.msft"}', OPERATOR, True),
    (b'{"topic": "stock.nasdaq.msft", "tenant": "acme"}', OPERATOR, True),
    (b'{"topic": "stock.nasdaq.msft", "tenant": "globex"}', A, True),  # 403 wrong_tenant
    (b'{"topic": "stock.nasdaq.msft", "tenant": "acme"}', A, True),
    (b'{"topic": "orders.eu", "key": "order-7"}', A, True),  # a group's choice
    (b'{"topic": "orders.eu", "key": null, "tenant": null, "dialect": "amqp"}', A, True),
    (b'{"topic": "a/b/c", "dialect": "mqtt"}', A, True),
    (b'{"topic": "a/+", "dialect": "mqtt"}', A, True),  # 400 from the matcher
    (b'{"topic": "", "dialect": "nats"}', A, True),
    (b'{"topic": "a\\u0000b"}', A, True),  # nul_byte
    (b'{"topic": "' + b"w." * 200 + b'"}', A, True),  # topic_too_long
    (b'{"topic": "\\ud83d\\ude00"}', A, True),  # a surrogate pair is one character
    (b'{"topic": "a", "topic": "stock.x"}', A, True),  # the last one wins, as in json
    (b' \r\n{"topic": "stock.x"}\n', A, True),
    (b'{"topic": "stock.x"}', {**JSON, "Authorization": "Bearer nope"}, True),  # 401
    (b'{"topic": "stock.x"}', JSON, True),  # 401: no token
    (b'{"topic": "stock.x"}', {**JSON, "Authorization": f"Basic {TOKEN_A}"}, True),
    (b'{"topic": "stock.x"}', {**JSON, "Authorization": f"bearer   {TOKEN_A}  "}, True),
    (b'{"topic": "stock.x"}', {**JSON, "Authorization": "Bearer"}, True),
    (b'{"topic": "stock.x"}', {"Content-Type": "APPLICATION/JSON", **A}, True),
    # Not the fast path's: the route answers, and says what it always said.
    (b'{"topic": "stock.x"}', {**A, "Content-Type": "application/json; charset=utf-8"}, False),
    (b'{"topic": "stock.x"}', {**A, "Content-Type": "application/vnd.x+json"}, False),
    (b'{"topic": "stock.x"}', {**A, "Content-Type": "text/plain"}, False),
    (b'{"topic": "stock.x"}', {"Authorization": f"Bearer {TOKEN_A}"}, False),  # no type
    (
        b'{"topic": "stock.x"}',
        [
            ("Authorization", f"Bearer {TOKEN_A}"),
            ("Content-Type", "text/plain"),  # the first one counts
            ("Content-Type", "application/json"),
        ],
        False,
    ),
    (b'{"topic": "a\\ud800"}', A, False),  # lone_surrogate from the matcher
    (b'{"topic": "a\xed\xa0\x80"}', A, False),  # a surrogate in UTF-8 bytes
    (b'{"topic": "a\xff"}', A, False),  # invalid_utf8
    (b'{"topic": "a\nb"}', A, False),  # a raw control character
    (b'\xef\xbb\xbf{"topic": "stock.x"}', A, False),  # a BOM
    ('{"topic": "stock.x"}'.encode("utf-16"), A, False),
    (b"", A, False),
    (b"null", A, False),
    (b"[]", A, False),
    (b"{}", A, False),
    (b'{"topic": 1}', A, False),
    (b'{"topic": "x", "extra": 1}', A, False),
    (b'{"topic": "x", "dialect": "stomp"}', A, False),
    (b'{"topic": "x", "tenant": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", A, False),
    (b'{"topic": "x", "n": ' + b"9" * 5_000 + b"}", A, False),
    (b'{"topic": "x", "n": NaN}', A, False),
    (b'{"topic": "x"} trailing', A, False),
    (b'{"topic": "x"', A, False),
    (b'{"topic": "x", "extra": 1}', {**JSON, "Authorization": "Bearer nope"}, False),
    (b"not json", {**JSON, "Authorization": "Bearer nope"}, False),
]


def _answered_as_the_route(
    pair: Any,
    path: str,
    cases: Sequence[tuple[bytes, Mapping[str, str] | list[tuple[str, str]], bool]],
) -> tuple[set[int], list[str]]:
    """Send every case to both apps: each is the fast path's exactly when ``fast`` says so,
    the reference always routes, and the two apps' metrics agree. Returns the statuses
    seen and the metrics lines labelled with ``path``'s route."""
    seen_statuses: set[int] = set()
    for body, headers, fast in cases:
        (status, _), answered_fast = pair.both(body, headers, path=path)
        assert answered_fast is fast, (body[:100], headers)
        assert pair.reference_spy[-1] is True  # the reference always routes
        seen_statuses.add(status)
    fast_metrics, reference_metrics = pair.metrics()
    assert fast_metrics == reference_metrics
    labelled = [line for line in fast_metrics if f'route="{path}"' in line]
    assert any('status="200"' in line and 'method="POST"' in line for line in labelled)
    return seen_statuses, labelled


def test_every_answer_is_the_routes_own(make_pair: Any) -> None:
    seen_statuses, labelled = _answered_as_the_route(make_pair(), "/v1/match", CASES)
    # The corpus reaches every kind of answer the route gives.
    assert seen_statuses >= {200, 400, 401, 403, 422}
    assert any('status="401"' in line for line in labelled)


#: The same for ``POST /v1/match/batch``: every valid body is the fast path's (answers,
#: error entries, 401/403/413/422 keys_mismatch/429 raised past validation); others route.
BATCH_CASES: list[tuple[bytes, Mapping[str, str], bool]] = [
    (b'{"topics": ["stock.nasdaq.msft", "stock.x", "none"]}', A, True),
    (b'{"topics": ["stock.nasdaq.msft"]}', B, True),
    (b'{"topics": ["stock.nasdaq.msft"], "tenant": "acme"}', OPERATOR, True),
    (b'{"topics": ["stock.nasdaq.msft"], "tenant": "globex"}', A, True),  # 403
    (b'{"topics": []}', A, True),
    (b'{"topics": ["a\\u0000b", "stock.x", "' + b"w." * 200 + b'"]}', A, True),  # errors
    (b'{"topics": ["orders.eu", "orders.us"], "keys": ["k1", "k2"]}', A, True),  # groups
    (b'{"topics": ["orders.eu", "orders.us"]}', A, True),  # groups, keyed by topic
    (b'{"topics": ["orders.eu"], "keys": ["k1", "k2"]}', A, True),  # 422 keys_mismatch
    (b'{"topics": ["a/b/c", "a/+"], "dialect": "mqtt"}', A, True),
    (b'{"topics": ["x"]' + b', "dialect": "amqp"}', {**JSON, "Authorization": "Bearer no"}, True),
    (b'{"topics": ["x"]}', JSON, True),  # 401
    (b'{"topics": [' + b",".join([b'"stock.x"'] * 10_001) + b"]}", A, True),  # 413
    (b'{"topics": ["stock.x"]}', {**A, "Content-Type": "text/plain"}, False),
    (b'{"topics": "stock.x"}', A, False),
    (b'{"topics": [1]}', A, False),
    (b'{"topics": ["x"], "extra": 1}', A, False),
    (b'{"topics": ["a\\ud800"]}', A, False),
    (b"{}", A, False),
    (b"not json", A, False),
]


def test_every_batch_answer_is_the_routes_own(make_pair: Any) -> None:
    pair = make_pair(max_body_bytes=1_000_000)
    seen_statuses, _ = _answered_as_the_route(pair, "/v1/match/batch", BATCH_CASES)
    assert seen_statuses >= {200, 401, 403, 413, 422}


def test_what_the_middleware_refuses_never_reaches_either(make_pair: Any) -> None:
    """Edge refusals run before the fast path, as before the route: an unknown query
    parameter, a bad request id, a body over the limit (announced, or sent in chunks)."""
    pair = make_pair(max_body_bytes=1024)
    big = b'{"topic": "' + b"x" * 2_000 + b'"}'
    (status, body), _ = pair.both(b'{"topic": "a"}', A, path="/v1/match?x=1")
    assert (status, b"unknown_parameter" in body) == (400, True)
    (status, body), _ = pair.both(big, A)
    assert (status, b"body_too_large" in body) == (413, True)
    (status, body), answered_fast = pair.both([big[:600], big[600:1200], big[1200:]], A)
    assert (status, b"body_too_large" in body) == (413, True)
    assert answered_fast  # the limit broke while the fast path read the body
    bad_id = [("X-Request-ID", "two words"), *A.items()]
    responses = [
        client.post("/v1/match", content=b'{"topic": "a"}', headers=bad_id)
        for client in (pair.fast, pair.reference)
    ]
    assert [r.status_code for r in responses] == [400, 400]
    assert responses[0].json() == responses[1].json()
    fast_metrics, reference_metrics = pair.metrics()
    assert fast_metrics == reference_metrics


def test_rate_limits_count_fast_and_routed_requests_alike(make_pair: Any) -> None:
    """A bad body is charged (the route authenticates before it validates), so the fast
    path and the route draw on one bucket; the 429 has the route's Retry-After."""
    pair = make_pair(rate_match="0.001", rate_match_burst="3")
    answers = [
        pair.both(body, A)
        for body in (
            b'{"topic": "stock.x"}',
            b'{"topic": 1}',
            b'{"topic": "stock.x"}',
            b'{"topic": "stock.x"}',
            b'{"topic": 1}',
        )
    ]
    assert [status for (status, _), _ in answers] == [200, 422, 200, 429, 429]
    assert b"rate_limited" in answers[3][0][1]
    # Another tenant's bucket is its own; the operator is not limited.
    assert pair.both(b'{"topic": "stock.x"}', B)[0][0] == 200
    assert pair.both(b'{"topic": "stock.x"}', OPERATOR)[0][0] == 200
    fast_metrics, reference_metrics = pair.metrics()
    assert fast_metrics == reference_metrics
    assert any('route="/v1/match",status="429"' in line for line in fast_metrics)


def test_without_match_auth_the_fast_path_matches_as_the_operator(make_pair: Any) -> None:
    pair = make_pair(match_auth="false")
    for body, headers in (
        (b'{"topic": "stock.x.msft", "tenant": "acme"}', JSON),
        (b'{"topic": "stock.x.msft"}', {**JSON, "Authorization": "Bearer nope"}),
    ):
        (status, _), answered_fast = pair.both(body, headers)
        assert (status, answered_fast) == (200, True)
