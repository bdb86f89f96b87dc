"""The fast path of the single writes, ``POST /v1/subscriptions`` and
``DELETE /v1/subscriptions/{id}`` (``app.fastpath``), held to the FastAPI routes it stands
in for: two apps built alike, one with the fast path and one without (the reference), get
the same requests in the same order, good and bad (bodies, content types, tokens, tenants,
patterns, groups, quotas, ids, request ids, rate limits, body limits), and must give the
same answers: status, every header, the body (a row's ``created_at`` is the moment each
store wrote it, so it is compared as present, not by value), the same audit rows (who,
what, the request id, the address) and the same request counts per route in ``/metrics``.
A spy on the scope shows which requests the fast path answered itself, so the comparison
is not the route against itself."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.app.conftest import ADMIN, TOKEN_A, TOKEN_B
from tests.app.fast_twins import open_twins

REQUEST_ID = "write-fast-path-1"
SUBSCRIPTIONS = "/v1/subscriptions"

JSON = {"Content-Type": "application/json"}
A = {**JSON, "Authorization": f"Bearer {TOKEN_A}"}
B = {**JSON, "Authorization": f"Bearer {TOKEN_B}"}
OPERATOR = {**JSON, "Authorization": f"Bearer {ADMIN}"}


Answer = tuple[int, list[tuple[str, str]], Any]


def _answer(response: Any) -> Answer:
    """Status, headers and body of ``response``, with a row's write time replaced by a
    mark (checked to be a time), and a 429's seconds to wait (counted from each app's own
    start) too (checked to be a whole number); the body's length checked, then left out."""
    headers = response.headers.multi_items()
    if response.status_code == 429:
        wait = response.headers["retry-after"]
        assert int(wait) >= 1
        headers = [(n, "<wait>" if n == "retry-after" else v) for n, v in headers]
    length = [value for name, value in headers if name == "content-length"]
    assert length in ([], [str(len(response.content))])
    body: Any = response.content
    if response.headers.get("content-type") == "application/json":
        body = json.loads(response.content)
        if isinstance(body, dict) and "created_at" in body:
            datetime.fromisoformat(body["created_at"])
            body["created_at"] = "<written>"
        if response.status_code == 429:
            error = body["error"]
            assert error["retry_after"] == int(wait) and error["message"].endswith(f" {wait} s")
            error["retry_after"] = "<wait>"
            error["message"] = error["message"].removesuffix(f" {wait} s")
    return response.status_code, [(n, v) for n, v in headers if n != "content-length"], body


@dataclass
class Pair:
    fast: TestClient
    reference: TestClient
    fast_spy: list[bool]
    reference_spy: list[bool]

    def both(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str] | list[tuple[str, str]],
        content: bytes | list[bytes] | None = None,
    ) -> tuple[Answer, bool]:
        """Send the same request to both (a list of bytes: in chunks, without
        Content-Length); assert the same answers; return the answer and whether the fast
        path answered what the reference's route answered."""
        answers = []
        for client in (self.fast, self.reference):
            body = iter(content) if isinstance(content, list) else content
            response = client.request(method, path, content=body, headers=list(_items(headers)))
            answers.append(_answer(response))
        assert answers[0] == answers[1], (method, path, content, headers)
        # The reference's route answered (a path no route takes reaches none in either).
        return answers[0], self.reference_spy[-1] and not self.fast_spy[-1]

    def create(self, body: dict[str, Any], headers: Mapping[str, str] = A) -> tuple[Answer, bool]:
        return self.both("POST", SUBSCRIPTIONS, headers, json.dumps(body).encode())

    def agree_on_the_rest(self) -> list[str]:
        """The two apps' audit logs (but for the moment each row was written) and request
        counts are the same; the counts' lines of the write routes."""
        logs = []
        for client in (self.fast, self.reference):
            page = client.get("/v1/audit?limit=1000", headers=OPERATOR).json()
            assert page["next_after"] is None
            logs.append([{**row, "created_at": None} for row in page["items"]])
        assert logs[0] == logs[1]
        metrics = []
        for client in (self.fast, self.reference):
            text = client.get("/metrics", headers=OPERATOR).text
            metrics.append(
                sorted(
                    line
                    for line in text.splitlines()
                    if line.startswith(
                        ("topicstore_http_requests_total", "topicstore_http_request_seconds_count")
                    )
                )
            )
        assert metrics[0] == metrics[1]
        return [line for line in metrics[0] if f'route="{SUBSCRIPTIONS}' in line]


def _items(headers: Mapping[str, str] | list[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    yield ("X-Request-ID", REQUEST_ID)
    yield from headers.items() if isinstance(headers, Mapping) else headers


#: Stored in both apps before a test, in the same order (so with the same ids 1..3).
STORED: list[tuple[dict[str, Any], Mapping[str, str]]] = [
    ({"subscriber": "s1", "pattern": "stock.*.msft"}, A),
    ({"subscriber": "w1", "pattern": "orders.*", "group": "workers", "group_policy": "hash"}, A),
    ({"subscriber": "s3", "pattern": "stock.nasdaq.*"}, B),
]


@pytest.fixture
def make_pair(tmp_path: Path) -> Iterator[Any]:
    """Two apps on their own DuckDB files with the same settings and ``STORED``."""
    opened: list[TestClient] = []

    def make(**overrides: Any) -> Pair:
        def fill(client: TestClient) -> None:
            for body, headers in STORED:
                response = client.post(
                    SUBSCRIPTIONS, json=body, headers={**headers, "X-Request-ID": "stored"}
                )
                assert response.status_code == 201, response.text

        clients, spies = open_twins(
            tmp_path, opened, lambda path: path.startswith(SUBSCRIPTIONS), fill, **overrides
        )
        return Pair(clients[0], clients[1], spies[0], spies[1])

    yield make
    for client in opened:
        client.__exit__(None, None, None)


#: (body, headers, answered by the fast path itself): a JSON body ``SubscriptionIn``
#: accepts is the fast path's, whatever the store, the tenant or the token then says;
#: every other body goes to the route.
CREATES: list[tuple[bytes, Mapping[str, str] | list[tuple[str, str]], bool]] = [
    (b'{"subscriber": "s9", "pattern": "stock.new"}', A, True),  # 201
    (b'{"subscriber": "s9", "pattern": "stock.new"}', A, True),  # 200: already there
    (b'{"subscriber": "s9", "pattern": "stock.new", "tenant": "acme"}', OPERATOR, True),  # 200
    (b'{"subscriber": "s9", "pattern": "stock.new", "tenant": "initech"}', OPERATOR, True),
    (b'{"subscriber": "s9", "pattern": "stock.new"}', OPERATOR, True),  # tenant default
    (b'{"subscriber": "s9", "pattern": "stock.new", "tenant": "globex"}', A, True),  # 403
    (b'{"subscriber": "m", "pattern": "a/#/b", "dialect": "mqtt"}', A, True),  # 400
    (b'{"subscriber": "m", "pattern": "a/+/b", "dialect": "mqtt"}', A, True),
    (b'{"subscriber": "m", "pattern": "$share/g1/a/+/c", "dialect": "mqtt"}', A, True),
    (b'{"subscriber": "s", "pattern": "' + b"w." * 200 + b'x"}', A, True),  # too long
    (b'{"subscriber": "s", "pattern": "a\\u0000b"}', A, True),
    (b'{"subscriber": "", "pattern": "a"}', A, True),
    (b'{"subscriber": "w2", "pattern": "orders.*", "group": "workers"}', A, True),  # hash
    (
        b'{"subscriber": "w3", "pattern": "orders.*", "group": "workers", '
        b'"group_policy": "random"}',
        A,
        True,
    ),  # 409 group_policy_conflict
    (b'{"subscriber": "w1", "pattern": "orders.*"}', A, True),  # 201: not the group's key
    (b'{"subscriber": "w1", "pattern": "orders.*", "group": "other"}', A, True),
    (
        b'{"subscriber": "h", "kind": "headers", "criteria": {"x": "1", "y": null}, "mode": "any"}',
        A,
        True,
    ),
    (b'{"subscriber": "h", "kind": "headers", "criteria": {"x": "1"}, "pattern": "a"}', A, True),
    (
        b'{"subscriber": "l", "pattern": "l.1", "labels": {"team": "pay", "n": 0.1, '
        b'"big": 12345678901234567890, "deep": {"a": [1, true, null, "\\ud83d\\ude00"]}}}',
        A,
        True,
    ),
    (b'{"subscriber": "e", "pattern": "e.1", "expires_at": "2031-05-01T10:00:00+02:00"}', A, True),
    (
        b'{"subscriber": "e", "pattern": "e.3", "expires_at": "2031-05-01T10:00:00Z", "ttl": 60}',
        A,
        True,
    ),
    (b'{"subscriber": "a", "pattern": "x", "pattern": "dup.last"}', A, True),  # the last wins
    (b' \r\n{"subscriber": "ws", "pattern": "ws.1"}\n', A, True),
    (b'{"subscriber": "s", "pattern": "t.1"}', {**JSON, "Authorization": "Bearer nope"}, True),
    (b'{"subscriber": "s", "pattern": "t.1"}', JSON, True),  # 401: no token
    (b'{"subscriber": "s", "pattern": "t.1"}', {**JSON, "Authorization": f"Basic {TOKEN_A}"}, True),
    (b'{"subscriber": "s", "pattern": "t.1"}', {"Content-Type": "APPLICATION/JSON", **A}, True),
    # json.loads reads bytes in UTF-16 and with a BOM too (FastAPI's reading does).
    ('{"subscriber": "s", "pattern": "t.12"}'.encode("utf-16"), A, True),
    (b'\xef\xbb\xbf{"subscriber": "s", "pattern": "t.13"}', A, True),
    # Not the fast path's: the route answers, and says what it always said.
    (
        b'{"subscriber": "s", "pattern": "t.2"}',
        {**A, "Content-Type": "application/json; x=1"},
        False,
    ),
    (b'{"subscriber": "s", "pattern": "t.3"}', {**A, "Content-Type": "text/plain"}, False),
    (b'{"subscriber": "s", "pattern": "t.4"}', {"Authorization": f"Bearer {TOKEN_A}"}, False),
    (b'{"subscriber": "s", "pattern": "t.5", "extra": 1}', A, False),
    (b'{"subscriber": "s", "pattern": "t.6", "ttl": 0}', A, False),
    (b'{"subscriber": "s", "pattern": "t.7", "labels": {"n": NaN}}', A, False),
    (b'{"subscriber": "s", "pattern": "t.8", "labels": {"n": 1e400}}', A, False),
    (b'{"subscriber": "s", "pattern": "t.9", "kind": "queue"}', A, False),
    (b'{"subscriber": 1, "pattern": "t.10"}', A, False),
    (b'{"subscriber": "s", "pattern": "t.11"} trailing', A, False),
    (b'{"subscriber": "s", "pattern": "a\xff"}', A, False),  # not UTF-8
    (b'{"subscriber": "s", "labels": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", A, False),
    (b"", A, False),
    (b"null", A, False),
    (b"{}", A, False),
    (b"not json", {**JSON, "Authorization": "Bearer nope"}, False),
]


def test_every_create_is_answered_as_the_route_answers(make_pair: Any) -> None:
    pair = make_pair()
    statuses: set[int] = set()
    for body, headers, fast in CREATES:
        (status, _, _), answered_fast = pair.both("POST", SUBSCRIPTIONS, headers, body)
        assert answered_fast is fast, (body[:100], headers)
        statuses.add(status)
    # The corpus reaches every kind of answer the route gives.
    assert statuses >= {200, 201, 400, 401, 403, 409, 422}
    labelled = pair.agree_on_the_rest()
    assert any('status="201"' in line and 'method="POST"' in line for line in labelled)


def test_every_delete_is_answered_as_the_route_answers(make_pair: Any) -> None:
    pair = make_pair()
    (status, _, row), _ = pair.create({"subscriber": "d", "pattern": "d.1"})
    assert status == 201
    mine = row["id"]
    (status, _, other), _ = pair.create({"subscriber": "d", "pattern": "d.2"}, B)
    assert status == 201
    cases: list[tuple[str, Mapping[str, str], int, bool]] = [
        (f"{SUBSCRIPTIONS}/{other['id']}", A, 404, True),  # another tenant's
        (f"{SUBSCRIPTIONS}/{mine}", {"Authorization": "Bearer nope"}, 401, True),
        (f"{SUBSCRIPTIONS}/{mine}", {}, 401, True),
        (f"{SUBSCRIPTIONS}/{mine}", A, 204, True),
        (f"{SUBSCRIPTIONS}/{mine}", A, 404, True),  # gone
        (f"{SUBSCRIPTIONS}/{other['id']}", OPERATOR, 204, True),
        (f"{SUBSCRIPTIONS}/0", A, 404, True),
        (f"{SUBSCRIPTIONS}/{2**32 - 1}", A, 404, True),
        (f"{SUBSCRIPTIONS}/%31", A, 204, True),  # decoded: subscription 1
        # Not the fast path's: an id written otherwise, or another path.
        (f"{SUBSCRIPTIONS}/003", OPERATOR, 204, False),  # the route reads it as 3
        (f"{SUBSCRIPTIONS}/{2**32}", A, 422, False),
        (f"{SUBSCRIPTIONS}/-1", A, 422, False),
        (f"{SUBSCRIPTIONS}/+2", A, 204, False),  # the route reads it as 2
        (f"{SUBSCRIPTIONS}/1.0", A, 404, False),  # read as 1, gone by now
        (f"{SUBSCRIPTIONS}/%E2%91%A0", A, 422, False),  # a digit, but not ASCII
        (f"{SUBSCRIPTIONS}/bulk", A, 405, False),
        (f"{SUBSCRIPTIONS}/", A, 422, False),  # the selection delete, with no filter
        (f"{SUBSCRIPTIONS}/2/x", A, 404, False),
    ]
    for path, headers, expected, fast in cases:
        (status, _, _), answered_fast = pair.both("DELETE", path, headers)
        assert (status, answered_fast) == (expected, fast), path
    labelled = pair.agree_on_the_rest()
    route = 'route="/v1/subscriptions/{sub_id:id}"'
    assert any(route in line and 'status="204"' in line for line in labelled)


def test_a_write_at_the_quota_is_refused_alike(make_pair: Any) -> None:
    """Tenant acme holds two of its three; the third fits, a fourth is refused (a repeat
    of a stored one still answers); a removal makes room again."""
    pair = make_pair(tenant_quota=3)
    answers = [
        pair.create({"subscriber": "q", "pattern": pattern})
        for pattern in ("q.1", "q.2", "q.1", "stock.*.msft")
    ]
    assert [status for (status, _, _), _ in answers] == [201, 403, 200, 403]
    assert all(fast for _, fast in answers)
    assert answers[1][0][2]["error"]["code"] == "quota_exceeded"
    (status, _, _), _ = pair.both("DELETE", f"{SUBSCRIPTIONS}/1", A)
    assert status == 204
    assert pair.create({"subscriber": "q", "pattern": "q.2"})[0][0] == 201
    pair.agree_on_the_rest()


def test_what_the_middleware_refuses_never_reaches_either(make_pair: Any) -> None:
    """Edge refusals run before the fast path, as before the route: an unknown query
    parameter, a bad request id, a body over the limit (announced, or sent in chunks)."""
    pair = make_pair(max_body_bytes=1024)
    body = b'{"subscriber": "s", "pattern": "a.b"}'
    (status, _, answer), _ = pair.both("POST", f"{SUBSCRIPTIONS}?x=1", A, body)
    assert (status, answer["error"]["code"]) == (400, "unknown_parameter")
    (status, _, answer), _ = pair.both("DELETE", f"{SUBSCRIPTIONS}/1?x=1", A)
    assert (status, answer["error"]["code"]) == (400, "unknown_parameter")
    big = b'{"subscriber": "s", "pattern": "' + b"x" * 2_000 + b'"}'
    (status, _, answer), _ = pair.both("POST", SUBSCRIPTIONS, A, big)
    assert (status, answer["error"]["code"]) == (413, "body_too_large")
    (status, _, answer), fast = pair.both("POST", SUBSCRIPTIONS, A, [big[:600], big[600:]])
    assert (status, answer["error"]["code"], fast) == (413, "body_too_large", True)
    for client in (pair.fast, pair.reference):
        response = client.post(
            SUBSCRIPTIONS, content=body, headers=[("X-Request-ID", "two words"), *A.items()]
        )
        assert response.json()["error"]["code"] == "invalid_request_id"
    pair.agree_on_the_rest()


def test_rate_limits_count_fast_and_routed_writes_alike(make_pair: Any) -> None:
    """A bad body is charged (the route authenticates before it validates), so the fast
    path and the route draw on one bucket; the 429 has the route's Retry-After; nothing
    refused is written or audited."""
    pair = make_pair(rate_admin="0.001", rate_admin_burst="6")  # 2 spent on STORED
    answers = [
        pair.both(method, path, A, body)
        for method, path, body in (
            ("POST", SUBSCRIPTIONS, b'{"subscriber": "r", "pattern": "r.1"}'),
            ("POST", SUBSCRIPTIONS, b'{"subscriber": 1}'),
            ("DELETE", f"{SUBSCRIPTIONS}/1", None),
            ("POST", SUBSCRIPTIONS, b'{"subscriber": "r", "pattern": "r.2"}'),
            ("POST", SUBSCRIPTIONS, b'{"subscriber": "r", "pattern": "r.3"}'),
            ("DELETE", f"{SUBSCRIPTIONS}/2", None),
            ("POST", SUBSCRIPTIONS, b'{"subscriber": 1}'),
        )
    ]
    assert [status for (status, _, _), _ in answers] == [201, 422, 204, 201, 429, 429, 429]
    assert [fast for _, fast in answers] == [True, False, True, True, True, True, False]
    assert dict(answers[4][0][1])["retry-after"] == "<wait>"
    # Another tenant's bucket is its own; the operator is not limited.
    assert pair.create({"subscriber": "r", "pattern": "r.4"}, B)[0][0] == 201
    assert pair.create({"subscriber": "r", "pattern": "r.5"}, OPERATOR)[0][0] == 201
    pair.agree_on_the_rest()
