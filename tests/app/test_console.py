"""The web console at /ui, in a real browser: Debian's chromium, headless, driven by
Playwright, against a real ``topicstore serve`` on PostgreSQL and on DuckDB. Every page is
saved as a screenshot under ``TOPICSTORE_CONSOLE_ARTIFACTS`` (default
``.artifacts/console/``), for people to look at.

The console is a client of the API: each check compares what the page shows with what the
API answers, or with values written here by hand.
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.imports import read_items
from app.main import create_app
from harness.server import Server, start_server
from harness.services import require, reset_postgres
from store import Database
from tests.app.conftest import (
    A_HEADERS,
    ADMIN,
    ADMIN_HEADERS,
    B_HEADERS,
    TENANTS,
    TOKEN_A,
    make_settings,
)
from tests.routed import write_routed

CHROMIUM: Final = os.environ.get("TOPICSTORE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Where the screenshots go (git-ignored by default): the checkout's .artifacts/console/.
ARTIFACTS: Final = Path(
    os.environ.get(
        "TOPICSTORE_CONSOLE_ARTIFACTS",
        Path(__file__).resolve().parents[2] / ".artifacts" / "console",
    )
)
#: Playwright's wait for anything the page should show (a local server answers in ms).
WAIT_MS: Final = 10_000

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright

    HAVE_PLAYWRIGHT = True
except ImportError:  # the dev extras install it; `require` below says so
    HAVE_PLAYWRIGHT = False


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless chromium for the module (each test opens its own context)."""
    require(HAVE_PLAYWRIGHT, "the playwright package", "pip install -e '.[dev]'")
    require(
        Path(CHROMIUM).exists(), f"chromium at {CHROMIUM}", "make tools (apt-get install chromium)"
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module", params=["postgres", "duckdb"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A real uvicorn for the module on each backend (the tests act on different tenants),
    with an analytics directory written by hand: one server start per backend, not per test."""
    directory = tmp_path_factory.mktemp(f"console-{request.param}")
    if request.param == "postgres":
        store_url: str = request.getfixturevalue("postgres_url")
        reset_postgres(store_url)
    else:
        store_url = f"duckdb:///{directory / 'console.duckdb'}"
    routed = write_routed(directory / "routed")
    started = start_server(
        directory,
        {
            "database_url": store_url,
            "admin_token": ADMIN,
            "tenant_tokens": json.dumps(TENANTS),
            "poll_interval": "0.1",
            "history_interval": "0.2",  # the Health graphs' samples, in a test's time
            "analytics_dir": str(routed),
            "analytics_subscriptions": str(routed / "subscriptions.parquet"),
        },
    )
    try:
        started.wait_until("/readyz", 200)
        yield started
    finally:
        started.stop()


def backend_of(request: pytest.FixtureRequest) -> str:
    """The store the module's ``server`` runs on (for the screenshots' names)."""
    return str(request.node.callspec.params["server"])


def shoot(page: Page, backend: str, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{backend}-{name}.png"), full_page=True)


def log_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/ui")
    page.get_by_label("Bearer token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#who")).to_be_visible()


def api_rows(client: httpx.Client, **query: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/subscriptions", params={"limit": 1000, **query})
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["items"]
    return rows


def audit_rows(page: Page) -> list[dict[str, Any]]:
    """The Audit page's table: each row's fields as the page shows them (ids from the cell's
    ``data-ids``, the shown text being ranges)."""
    rows: list[dict[str, Any]] = page.locator("#audit-table tbody tr[data-id]").evaluate_all(
        """rows => rows.map(r => ({
            id: Number(r.dataset.id), action: r.cells[3].textContent,
            ids: r.cells[4].dataset.ids.split(",").map(Number), tenant: r.cells[2].textContent,
            caller: r.cells[5].textContent, token: r.cells[6].textContent,
            request_id: r.cells[7].textContent, address: r.cells[8].textContent }))"""
    )
    return rows


def api_audit(client: httpx.Client, **query: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/audit", params={"limit": 1000, **query})
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()["items"]
    return rows


def wait_for_sampled_matches(client: httpx.Client) -> None:
    """Until the service's history holds a sample with matches in it (a few sampling
    intervals after the matches)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        history = client.get("/v1/metrics/history")
        assert history.status_code == 200, history.text
        if any(s["matches"] for s in history.json()["samples"]):
            return
        assert time.monotonic() < deadline, history.json()
        time.sleep(0.1)


def table_ids(page: Page, table: str) -> list[int]:
    cells = page.locator(f"{table} tbody tr[data-id]")
    return [int(v) for v in cells.evaluate_all("rows => rows.map(r => r.dataset.id)")]


def test_console_end_to_end(
    browser: Browser, server: Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """An operator's session on every page, checked against the API (tenant ``default``)."""
    backend = backend_of(request)
    expect.set_options(timeout=WAIT_MS)
    admin = server.client(ADMIN_HEADERS)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    # The browser logs every refused request ("Failed to load resource"): those are the
    # refusals provoked here; any other error in the console is the page's own.
    page.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text}")
            if m.type == "error" and not m.text.startswith("Failed to load resource")
            else None
        ),
    )

    # The browser's successful writes, in order, with the request id each response carried
    # (the audit log must name them).
    writes: list[str] = []
    page.on(
        "response",
        lambda r: (
            writes.append(r.headers["x-request-id"])
            if r.request.method in {"POST", "DELETE"} and "/v1/subscri" in r.url and r.ok
            else None
        ),
    )

    # Log in: a wrong token is refused with the API's code; the token never enters a URL.
    page.goto(server.url + "/ui")
    expect(page.locator("#node-ready")).to_have_text("ready")
    shoot(page, backend, "login")
    page.get_by_label("Bearer token").fill("not-a-token-of-this-service")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_contain_text("401 unauthorized: unknown token")
    log_in(page, server.url, ADMIN)
    expect(page.locator("#who-role")).to_have_text("operator (any tenant)")
    assert ADMIN not in page.url
    assert page.evaluate("sessionStorage.getItem('topicstore.token')") == ADMIN

    # Health first, to see its numbers move after the writes below; by keyboard (the tabs
    # are links).
    page.get_by_role("link", name="Health").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("link", name="Health")).to_have_attribute("aria-current", "page")
    subs_tile = page.locator('[data-metric="Subscriptions"] .value')
    expect(subs_tile).not_to_have_text("-")
    before = int(subs_tile.inner_text().replace(",", ""))
    assert before == httpx.get(server.url + "/readyz").json()["subscriptions"]

    # Create through the form; the row is in the API and in the table.
    page.get_by_role("link", name="Subscriptions").click()
    create = page.locator("#create-form")
    for subscriber, pattern, dialect in [
        ("billing", "stock.*.msft", "amqp"),
        ("audit", "stock.#", "amqp"),
        ("sensors", "home/+/temp", "mqtt"),
    ]:
        create.get_by_label("Subscriber").fill(subscriber)
        create.get_by_label("Pattern").fill(pattern)
        create.get_by_label("Dialect").select_option(dialect)
        create.get_by_label("Labels").fill("team=pay, env=prod")
        create.get_by_role("button", name="Add").click()
        expect(page.locator("#create-result")).to_contain_text(f"{subscriber} → {pattern}")
    rows = api_rows(admin)
    assert [(r["subscriber"], r["pattern"], r["labels"]) for r in rows] == [
        ("billing", "stock.*.msft", {"team": "pay", "env": "prod"}),
        ("audit", "stock.#", {"team": "pay", "env": "prod"}),
        ("sensors", "home/+/temp", {"team": "pay", "env": "prod"}),
    ]
    expect(page.locator("#counts")).to_contain_text("total3")
    # A refusal shows the API's code and message.
    create.get_by_label("Subscriber").fill("billing")
    create.get_by_label("Pattern").fill("home/#/temp")
    create.get_by_label("Dialect").select_option("mqtt")
    create.get_by_label("Labels").fill("")
    create.get_by_role("button", name="Add").click()
    expect(page.locator("#create-result")).to_contain_text(
        "400 invalid_wildcard: mqtt: '#' may only be the last word of a pattern"
    )

    # Import a file with a bad line: per-line results, the good lines stored.
    csv_file = tmp_path / "subs.csv"
    lines = ["subscriber,pattern,dialect"]
    lines += [f"bulk-{i:02d},orders.{i}.#,amqp" for i in range(60)]
    lines.insert(5, "broken,a/#/b,mqtt")  # line 6: an invalid wildcard
    lines.insert(9, "only-one-column")  # line 10: a bad number of columns
    csv_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    page.locator("#import-form").get_by_label("File").set_input_files(str(csv_file))
    page.locator("#import-form").get_by_role("button", name="Import").click()
    expect(page.locator("#import-summary")).to_have_text(
        "subs.csv: 60 created, 0 already existed, 2 failed"
    )
    bad = page.locator("#import-table tbody tr.bad")
    expect(bad).to_have_count(2)
    expect(bad.nth(0)).to_contain_text("6")
    expect(bad.nth(0)).to_contain_text("invalid_wildcard")
    expect(bad.nth(1)).to_contain_text("10")
    expect(bad.nth(1)).to_contain_text("bad_columns")
    assert len(api_rows(admin)) == 63
    expect(page.locator("#counts")).to_contain_text("total63")
    shoot(page, backend, "subscriptions")

    # Search and page (keyset): pages of 25 in id order, as the API gives them.
    search = page.locator("#search-form")
    search.get_by_label("Pattern prefix").fill("orders.")
    search.get_by_label("Page size").select_option("25")
    search.get_by_role("button", name="Search").click()
    wanted = [r["id"] for r in api_rows(admin, pattern_prefix="orders.")]
    assert len(wanted) == 60
    info = page.locator("#page-info")

    def page_info(number: int, ids: list[int]) -> str:
        rows = "1 row" if len(ids) == 1 else f"{len(ids)} rows"
        return f"page {number} · ids {ids[0]}\u2013{ids[-1]} · {rows}"

    expect(info).to_have_text(page_info(1, wanted[:25]))
    assert table_ids(page, "#subs-table") == wanted[:25]
    page.get_by_role("button", name="Next page").click()
    expect(info).to_have_text(page_info(2, wanted[25:50]))
    assert table_ids(page, "#subs-table") == wanted[25:50]
    page.get_by_role("button", name="Next page").click()
    expect(info).to_have_text(page_info(3, wanted[50:]))
    assert table_ids(page, "#subs-table") == wanted[50:]
    expect(page.get_by_role("button", name="Next page")).to_be_disabled()
    page.get_by_role("button", name="Previous").click()
    expect(info).to_have_text(page_info(2, wanted[25:50]))
    # A subscriber's name filters by it.
    page.get_by_role("button", name="bulk-30", exact=True).click()
    expect(search.get_by_label("Subscriber")).to_have_value("bulk-30")
    expect(info).to_have_text(page_info(1, [wanted[30]]))
    search.get_by_label("Pattern prefix").fill("")
    search.get_by_label("Subscriber").fill("audit")
    search.get_by_role("button", name="Search").click()
    expect(page.locator("#subs-table tbody tr")).to_have_count(1)
    expect(page.locator("#subs-table tbody")).to_contain_text("stock.#")

    # Delete (confirmed in the browser's dialog): gone from the API too.
    audit_id = next(r["id"] for r in api_rows(admin, subscriber="audit"))
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Delete subscription {audit_id}").click()
    expect(page.locator("#create-result")).to_have_text(f"deleted #{audit_id}")
    assert admin.get(f"/v1/subscriptions/{audit_id}").status_code == 404
    expect(page.locator("#subs-table tbody td.empty")).to_have_text("no subscriptions match")

    # Match tester: live as one types, the same answer as /v1/match.
    page.get_by_role("link", name="Match tester").click()
    for topic, dialect in [("stock.nyse.msft", "amqp"), ("orders.7.x.y", "amqp")]:
        page.locator("#match-form").get_by_label("Dialect").select_option(dialect)
        page.get_by_label("Topic", exact=True).fill(topic)
        api_answer = admin.post("/v1/match", json={"topic": topic, "dialect": dialect}).json()
        ids = ",".join(str(i) for i in api_answer["subscriptions"])
        expect(page.locator("#match-summary")).to_have_attribute("data-ids", ids)
        expect(page.locator("#match-summary")).to_contain_text(
            f'"{topic}" ({dialect}) reaches {len(api_answer["subscriptions"])} subscription'
        )
        assert table_ids(page, "#match-table") == api_answer["subscriptions"]
    page.locator("#match-form").get_by_label("Dialect").select_option("mqtt")
    page.get_by_label("Topic", exact=True).fill("home/kitchen/temp")
    expect(page.locator("#match-table tbody")).to_contain_text("sensors")
    page.get_by_label("Topic", exact=True).fill("home/\x00")
    expect(page.locator("#match-error")).to_contain_text("400 nul_byte")
    page.get_by_label("Topic", exact=True).fill("stock.nyse.msft")
    page.locator("#match-form").get_by_label("Dialect").select_option("amqp")
    page.get_by_label("Topics, one per line").fill("stock.a.msft\norders.1\n" + "x" * 300)
    page.get_by_role("button", name="Match all").click()
    batch_rows = page.locator("#batch-table tbody tr")
    expect(batch_rows).to_have_count(3)
    expect(batch_rows.nth(0)).to_contain_text("billing")
    expect(batch_rows.nth(1)).to_contain_text("bulk-01")
    expect(batch_rows.nth(2)).to_contain_text("topic_too_long")
    expect(page.locator("#match-summary")).to_contain_text("billing")
    shoot(page, backend, "match")

    # Health: the numbers moved with the writes and the matches above.
    page.get_by_role("link", name="Health").click()
    expect(subs_tile).to_have_text(str(before + 62))
    tenants = page.locator("#tenants-table tbody")
    expect(tenants).to_contain_text("default")
    expect(tenants.locator("tr").filter(has_text="amqp")).to_contain_text("61")
    # The graphs: the service's own samples (every 0.2 s here) of the matches above.
    wait_for_sampled_matches(admin)
    page.get_by_role("button", name="Refresh now").click()
    expect(page.locator('[data-metric="Matches total"] .value')).not_to_have_text("0")
    expect(page.locator('[data-metric="Match rate"] .value')).to_contain_text("/s")
    expect(page.locator("#routes-table tbody")).to_contain_text("/v1/match")
    for graph in ("rate", "latency", "lag"):
        expect(page.locator(f"#graph-{graph}")).not_to_have_attribute("data-points", "0")
    # Latency has a point only where matches were answered: the traffic above is drawn.
    expect(page.locator("#graph-latency path[data-series=p50_ms]")).to_have_attribute(
        "d", re.compile(r"^M[\d.]+,[\d.]+")
    )
    expect(page.locator("#graph-rate circle")).to_have_count(1)  # the newest sample
    expect(page.locator("#graphs-hint")).to_contain_text("one sample every 0.20 s")
    shoot(page, backend, "health")

    # Analytics: charts and tables of the hand-written route output (tests/routed.py).
    page.get_by_role("link", name="Analytics").click()
    page.locator("#analytics-form").get_by_label("Query").select_option("subscribers")
    page.get_by_role("button", name="Run").click()
    first = page.locator("#analytics-table tbody tr").first
    expect(first).to_contain_text("alice")
    expect(page.locator("#analytics-chart svg rect")).to_have_count(4)
    shoot(page, backend, "analytics")
    page.locator("#analytics-form").get_by_label("Query").select_option("timeline")
    page.locator("#analytics-form").get_by_label("Bucket").select_option("day")
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#analytics-table caption")).to_have_text("timeline: 2 rows")
    expect(page.locator("#analytics-chart path.line")).to_have_count(1)
    shoot(page, backend, "analytics-timeline")

    # Every subscription of one subscriber at once (DELETE /v1/subscribers/{name}/...).
    page.get_by_role("link", name="Subscriptions").click()
    search.get_by_label("Subscriber").fill("sensors")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete every subscription of sensors").click()
    expect(page.locator("#create-result")).to_have_text("deleted 1 subscription of sensors")
    assert api_rows(admin, subscriber="sensors") == []
    expect(page.locator("#counts")).to_contain_text("total61")

    # Audit: each change made above through the console, with its action, its ids and the
    # request id its response carried; the refused create wrote nothing.
    billing_id, sensors_id = (r["id"] for r in rows if r["subscriber"] in {"billing", "sensors"})
    changes = [
        ("create", [billing_id]),
        ("create", [audit_id]),
        ("create", [sensors_id]),
        ("bulk_create", wanted),
        ("delete", [audit_id]),
        ("delete_subscriber", [sensors_id]),
    ]
    assert len(writes) == len(changes)
    page.get_by_role("link", name="Audit").click()
    audit = page.locator("#audit-form")
    audit.get_by_label("Tenant").fill("default")
    audit.get_by_role("button", name="Filter").click()
    expect(page.locator("#audit-info")).to_contain_text("6 rows")
    expect(page.locator("#audit-caption")).to_have_text("Admin changes of tenant default")
    shown = audit_rows(page)  # newest first, the page's default
    assert [(r["action"], r["ids"], r["request_id"]) for r in shown] == [
        (action, ids, request_id) for (action, ids), request_id in zip(changes, writes, strict=True)
    ][::-1]
    assert {(r["tenant"], r["caller"], r["token"], r["address"]) for r in shown} == {
        ("default", "operator (any tenant)", "operator", "127.0.0.1")
    }
    oldest = [r["id"] for r in api_audit(admin, tenant="default")]
    assert [r["id"] for r in shown] == oldest[::-1]
    bulk_cell = page.locator("#audit-table tbody tr[data-action=bulk_create] td").nth(4)
    expect(bulk_cell).to_contain_text("(60)")
    shoot(page, backend, "audit")
    audit.get_by_label("Action").select_option("create")
    audit.get_by_label("Order").select_option("asc")
    audit.get_by_role("button", name="Filter").click()
    expect(page.locator("#audit-info")).to_contain_text("3 rows")
    assert [r["ids"] for r in audit_rows(page)] == [[billing_id], [audit_id], [sensors_id]]

    assert not problems, problems
    context.close()


def test_tenant_token_sees_its_tenant_only(
    browser: Browser, server: Server, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A tenant's token: its own rows, a 403 for another tenant's, and the operator-only
    analytics refused; at a phone's width the pages still work."""
    backend = backend_of(request)
    expect.set_options(timeout=WAIT_MS)
    theirs = server.client(B_HEADERS).post(
        "/v1/subscriptions", json={"subscriber": "globex-q", "pattern": "secret.#"}
    )
    assert theirs.status_code == 201, theirs.text
    ours = server.client(A_HEADERS).post(
        "/v1/subscriptions", json={"subscriber": "acme-q", "pattern": "secret.#"}
    )
    assert ours.status_code == 201, ours.text
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    log_in(page, server.url, TOKEN_A)
    expect(page.locator("#who-role")).to_have_text("tenant acme")
    expect(page.locator("#tenant-field")).to_be_hidden()
    expect(page.locator("#subs-table tbody tr")).to_have_count(1)
    expect(page.locator("#subs-table tbody")).to_contain_text("acme-q")
    expect(page.locator("#counts")).to_contain_text("tenant acme")
    shoot(page, backend, "tenant-phone-subscriptions")

    # Another tenant's subscription, asked for by id: the API's 403 or 404, shown as such.
    page.get_by_role("link", name="Match tester").click()
    page.get_by_label("Topic", exact=True).fill("secret.plans")
    expect(page.locator("#match-summary")).to_contain_text("acme-q")
    expect(page.locator("#match-summary")).not_to_contain_text("globex-q")
    shoot(page, backend, "tenant-phone-match")
    # Another tenant's data: a line of an import naming it is refused, 403 wrong_tenant in
    # the API, shown on its line; the good line is stored in the caller's tenant.
    page.get_by_role("link", name="Subscriptions").click()
    csv_file = tmp_path / "mixed.csv"
    csv_file.write_text("acme-2,secret.a\nsneaky,secret.#,amqp,globex\n", encoding="utf-8")
    page.locator("#import-form").get_by_label("File").set_input_files(str(csv_file))
    page.locator("#import-form").get_by_role("button", name="Import").click()
    expect(page.locator("#import-summary")).to_have_text(
        "mixed.csv: 1 created, 0 already existed, 1 failed"
    )
    bad = page.locator("#import-table tbody tr.bad")
    expect(bad).to_contain_text("wrong_tenant")
    expect(bad).to_contain_text("this token may only act on its own tenant")
    assert [r["subscriber"] for r in api_rows(server.client(B_HEADERS))] == ["globex-q"]
    assert [r["subscriber"] for r in api_rows(server.client(A_HEADERS))] == ["acme-q", "acme-2"]
    shoot(page, backend, "tenant-phone-import")

    # The audit log: this tenant's rows only (its create through the API, its import here),
    # no tenant filter to pick another.
    page.get_by_role("link", name="Audit").click()
    expect(page.locator("#audit-tenant-field")).to_be_hidden()
    expect(page.locator("#audit-caption")).to_have_text("Admin changes of tenant acme")
    acme_2 = api_rows(server.client(A_HEADERS), subscriber="acme-2")[0]["id"]
    expected = api_audit(server.client(A_HEADERS))
    assert [(r["action"], r["ids"]) for r in expected] == [
        ("create", [ours.json()["id"]]),
        ("bulk_create", [acme_2]),
    ]
    expect(page.locator("#audit-table tbody tr[data-id]")).to_have_count(len(expected))
    shown = audit_rows(page)  # newest first
    assert [(r["id"], r["action"], r["ids"]) for r in shown] == [
        (r["id"], r["action"], r["ids"]) for r in expected
    ][::-1]
    # Who acted (the tenant's token) apart from which token (its name, as the API has it).
    assert {(r["tenant"], r["caller"], r["token"]) for r in shown} == {
        ("acme", "tenant acme", expected[0]["caller_name"])
    }
    assert expected[0]["caller_name"].startswith("acme:")
    expect(page.locator("#audit-table")).not_to_contain_text("globex")
    shoot(page, backend, "tenant-phone-audit")
    page.get_by_role("link", name="Analytics").click()
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#analytics-error")).to_contain_text(
        "403 operator_only: analytics span every tenant"
    )
    shoot(page, backend, "tenant-phone-analytics")
    context.close()

    # The operator picks a tenant in the header (suggested from the routing table).
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    expect(page.locator("#tenants option[value=globex]")).to_have_count(1)
    page.locator("header").get_by_label("Tenant").fill("globex")
    page.locator("header").get_by_label("Tenant").press("Enter")
    expect(page.locator("#counts")).to_contain_text("tenant globex")
    expect(page.locator("#subs-table tbody tr")).to_have_count(1)
    expect(page.locator("#subs-table tbody")).to_contain_text("globex-q")
    # A token the service no longer knows (a restart with new tokens): back to the login,
    # saying why.
    page.evaluate("sessionStorage.setItem('topicstore.token', 'a-token-nobody-knows')")
    page.reload()
    expect(page.locator("#login-error")).to_have_text("401 unauthorized: unknown token")
    expect(page.locator("#app-view")).to_be_hidden()
    context.close()


#: Tenant of the explain/groups/overlaps test: its own rows, written through the API.
WIRE: Final = "wire"


def shown_rows(page: Page, table: str, fields: str) -> list[dict[str, Any]]:
    """The rows of ``table`` as ``fields`` (a JS object literal over ``r``, a row) reads them."""
    rows: list[dict[str, Any]] = page.locator(f"{table} tbody tr").evaluate_all(
        f"rows => rows.map(r => ({fields}))"
    )
    return rows


def test_explain_groups_and_overlaps(
    browser: Browser, server: Server, request: pytest.FixtureRequest
) -> None:
    """The issue-11 views against the API on a tenant of its own: the match tester's
    explanation (the words each wildcard took, and where a named subscriber's closest pattern
    failed) and the groups' chosen members; a shared subscription created from the form; the
    Overlaps page's two searches with their paging, a subscriber's redundant patterns, and a
    refusal shown with the API's status, code and message."""
    backend = backend_of(request)
    expect.set_options(timeout=WAIT_MS)
    admin = server.client(ADMIN_HEADERS)
    items: list[dict[str, Any]] = [
        {"subscriber": "billing", "pattern": "stock.*.msft"},
        {"subscriber": "audit", "pattern": "stock.#"},
        {"subscriber": "nyse", "pattern": "stock.nyse.#"},
        {
            "subscriber": "w1",
            "pattern": "orders.*.created",
            "group": "workers",
            "group_policy": "hash",
        },
        {"subscriber": "w2", "pattern": "orders.#", "group": "workers"},
        {"subscriber": "w3", "pattern": "orders.eu.*", "group": "workers"},
        {"subscriber": "dup", "pattern": "a.#"},
        {"subscriber": "dup", "pattern": "a.b.c"},
        {"subscriber": "dup", "pattern": "a.*.c"},
        {"subscriber": "dup", "pattern": "x.y"},
    ]
    items += [{"subscriber": f"f{i:02d}", "pattern": f"orders.{i}.#"} for i in range(30)]
    bulk = admin.post(
        "/v1/subscriptions/bulk", json={"items": [{**i, "tenant": WIRE} for i in items]}
    )
    assert bulk.json()["created"] == len(items), bulk.text

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    page.locator("header").get_by_label("Tenant").fill(WIRE)
    page.locator("header").get_by_label("Tenant").press("Enter")
    expect(page.locator("#counts")).to_contain_text(f"tenant {WIRE}")
    expect(page.locator("#subs-table tbody tr[data-id]")).to_have_count(40)
    # The group column; a member added from the form inherits the group's policy, another
    # policy is refused with the API's code and message.
    w1 = page.locator("#subs-table tbody tr").filter(has_text="orders.*.created")
    expect(w1.locator("[data-group]")).to_have_text("workers · hash")
    create = page.locator("#create-form")
    create.get_by_label("Subscriber").fill("w4")
    create.get_by_label("Pattern").fill("orders.us.*")
    create.get_by_label("Group", exact=True).fill("workers")
    create.get_by_role("button", name="Add").click()
    expect(page.locator("#create-result")).to_contain_text("w4 → orders.us.* (group workers, hash)")
    assert [
        (r["group"], r["group_policy"]) for r in api_rows(admin, tenant=WIRE, subscriber="w4")
    ] == [("workers", "hash")]
    create.get_by_label("Subscriber").fill("w5")
    create.get_by_label("Pattern").fill("orders.us.*")
    create.get_by_label("Group policy").select_option("random")
    create.get_by_role("button", name="Add").click()
    refusal = admin.post(
        "/v1/subscriptions",
        json={
            "subscriber": "w5",
            "pattern": "orders.us.*",
            "group": "workers",
            "group_policy": "random",
            "tenant": WIRE,
        },
    )
    assert refusal.status_code == 409, refusal.text
    error = refusal.json()["error"]
    expect(page.locator("#create-result")).to_have_text(f"409 {error['code']}: {error['message']}")
    shoot(page, backend, "subscriptions-groups")
    # Search by group (the rows are the API's) and by a label nobody holds (none).
    search = page.locator("#search-form")
    search.get_by_label("Group").fill("workers")
    search.get_by_role("button", name="Search").click()
    members = [r["id"] for r in api_rows(admin, tenant=WIRE, group="workers")]
    rows = page.locator("#subs-table tbody tr[data-id]")
    expect(rows).to_have_count(len(members))
    assert rows.evaluate_all("rows => rows.map(r => Number(r.dataset.id))") == members
    search.get_by_label("Group").fill("")
    search.get_by_label("Label").fill("absent=x")
    search.get_by_role("button", name="Search").click()
    expect(page.locator("#subs-table tbody")).to_contain_text("no subscriptions match")
    search.get_by_role("button", name="Clear").click()
    expect(rows).to_have_count(40 + 1)  # w4 joined

    # Match tester: the explanation is the API's, wildcard by wildcard; a named subscriber
    # that does not receive the topic shows its closest pattern and the failing word.
    page.get_by_role("link", name="Match tester").click()
    match = page.locator("#match-form")
    match.get_by_label("Why not (subscribers)").fill("nyse, nobody")
    match.get_by_label("Topic", exact=True).fill("stock.nasdaq.msft")
    why = admin.get(
        "/v1/match/explain",
        params={"topic": "stock.nasdaq.msft", "tenant": WIRE, "subscriber": ["nyse", "nobody"]},
    ).json()
    ids = ",".join(str(m["id"]) for m in why["matched"])
    expect(page.locator("#match-summary")).to_have_attribute("data-ids", ids)
    assert (
        shown_rows(
            page,
            "#match-table",
            "{id: Number(r.dataset.id), subscriber: r.cells[1].textContent, "
            "pattern: r.cells[2].textContent, captures: JSON.parse(r.cells[3].dataset.captures)}",
        )
        == why["matched"]
    )
    billing = page.locator("#match-table tr").filter(has_text="billing")
    expect(billing.locator(".cap")).to_have_text("*2 = nasdaq")
    expect(page.locator("#match-table tr").filter(has_text="audit").locator(".cap")).to_have_text(
        "#2 = nasdaq.msft"
    )
    unmatched = [
        {
            "subscriber": u["subscriber"],
            "closest": u["closest"] and u["closest"]["id"],
            "position": u["closest"] and u["closest"]["failure"]["position"],
            "reason": u["closest"] and u["closest"]["failure"]["reason"],
        }
        for u in why["unmatched"]
    ]
    assert [u["subscriber"] for u in unmatched] == ["nyse", "nobody"]
    expect(page.locator("#unmatched-table tbody tr")).to_have_count(2)
    assert (
        shown_rows(
            page,
            "#unmatched-table",
            "{subscriber: r.dataset.subscriber, "
            "closest: r.dataset.closest ? Number(r.dataset.closest) : null, "
            "position: r.dataset.closest ? Number(r.cells[4].dataset.position) : null, "
            "reason: r.dataset.reason || null}",
        )
        == unmatched
    )
    nyse = page.locator("#unmatched-table tr[data-subscriber=nyse]")
    expect(nyse.locator("mark")).to_have_text("nasdaq")
    expect(nyse).to_contain_text("mismatch: expected nyse")
    expect(page.locator("#unmatched-table tr[data-subscriber=nobody]")).to_contain_text(
        "no subscription in amqp"
    )
    expect(page.locator("#groups-table tbody")).to_have_text("no group matched")
    shoot(page, backend, "match-why-not")

    # Groups: one chosen member per group, the API's for the same key.
    match.get_by_label("Key").fill("order-1")
    match.get_by_label("Why not (subscribers)").fill("")
    match.get_by_label("Topic", exact=True).fill("orders.eu.created")
    delivered = admin.post(
        "/v1/match", json={"topic": "orders.eu.created", "tenant": WIRE, "key": "order-1"}
    ).json()
    assert len(delivered["groups"]) == 1 and delivered["groups"][0]["candidates"] == 3
    expect(page.locator("#match-summary")).to_have_attribute(
        "data-ids", ",".join(str(i) for i in delivered["subscriptions"])
    )
    expect(page.locator("#groups-table tbody tr")).to_have_count(1)
    assert (
        shown_rows(
            page,
            "#groups-table",
            "{group: r.cells[0].textContent, policy: r.cells[1].textContent, "
            "subscription: Number(r.cells[2].textContent), subscriber: r.cells[3].textContent, "
            "candidates: Number(r.cells[4].textContent)}",
        )
        == delivered["groups"]
    )
    expect(page.locator("#match-summary")).to_contain_text(
        "2 other group members matched but not chosen"
    )
    expect(page.locator("#unmatched-table")).to_be_hidden()
    # The batch box: each topic's group choice (the topic as the key), as the API's.
    page.get_by_label("Topics, one per line").fill("orders.eu.created\nstock.x.msft")
    page.get_by_role("button", name="Match all").click()
    batch = admin.post(
        "/v1/match/batch",
        json={"topics": ["orders.eu.created", "stock.x.msft"], "tenant": WIRE},
    ).json()["results"]
    choice = batch[0]["groups"][0]
    expect(page.locator("#batch-table tbody tr").nth(0)).to_contain_text(
        f"{choice['group']} → {choice['subscriber']}"
    )
    expect(page.locator("#batch-table tbody tr").nth(1)).to_contain_text("audit, billing")
    shoot(page, backend, "match-explain")

    # Overlaps: pages of 25 as the API gives them; covered_by; a redundant search.
    page.get_by_role("link", name="Overlaps").click()
    search = page.locator("#overlaps-form")
    search.get_by_label("Pattern").fill("orders.*.created")
    search.get_by_label("Page size").select_option("25")
    search.get_by_role("button", name="Search").click()
    first = admin.get(
        "/v1/subscriptions", params={"overlaps": "orders.*.created", "tenant": WIRE, "limit": 25}
    ).json()
    assert first["next_after"] is not None
    second = admin.get(
        "/v1/subscriptions",
        params={
            "overlaps": "orders.*.created",
            "tenant": WIRE,
            "limit": 25,
            "after": first["next_after"],
        },
    ).json()
    info = page.locator("#overlaps-info")
    expect(info).to_contain_text(f"page 1 · ids {first['items'][0]['id']}")
    assert table_ids(page, "#overlaps-table") == [r["id"] for r in first["items"]]
    page.locator("#overlaps-pager").get_by_role("button", name="Next page").click()
    expect(info).to_contain_text("page 2 ")
    assert table_ids(page, "#overlaps-table") == [r["id"] for r in second["items"]]
    # The 30 orders.N.# and the four workers (orders.us.* too: orders.us.created).
    assert len(first["items"]) + len(second["items"]) == 34
    assert second["next_after"] is None
    expect(page.locator("#overlaps-pager").get_by_role("button", name="Next page")).to_be_disabled()
    page.locator("#overlaps-pager").get_by_role("button", name="First page").click()
    expect(info).to_contain_text("page 1 ")
    search.get_by_label("Pattern").fill("stock.#")
    search.get_by_label("it covers").check()
    search.get_by_role("button", name="Search").click()
    covered = api_rows(admin, covered_by="stock.#", tenant=WIRE)
    assert [r["subscriber"] for r in covered] == ["billing", "audit", "nyse"]
    expect(page.locator("#overlaps-caption")).to_have_text(
        "Subscriptions covered by stock.# (amqp)"
    )
    expect(page.locator("#overlaps-table tbody tr[data-id]")).to_have_count(3)
    assert table_ids(page, "#overlaps-table") == [r["id"] for r in covered]

    # A subscriber's redundant patterns: from its name in the results, or typed.
    page.locator("#overlaps-table").get_by_role("button", name="audit").click()
    expect(page.locator("#redundant-summary")).to_have_text(
        "audit (tenant wire) holds 1 pattern in amqp; 0 redundant"
    )
    redundant = page.locator("#redundant-form")
    redundant.get_by_label("Subscriber").fill("dup")
    redundant.get_by_role("button", name="Find redundant").click()
    answer = admin.get("/v1/subscribers/dup/redundant", params={"tenant": WIRE}).json()
    assert len(answer["redundant"]) == 2
    expect(page.locator("#redundant-table tbody tr[data-id]")).to_have_count(2)
    assert (
        shown_rows(
            page,
            "#redundant-table",
            "{id: Number(r.dataset.id), pattern: r.cells[1].textContent, "
            "covered_by: Number(r.dataset.coveredBy), covered_by_pattern: r.cells[3].textContent}",
        )
        == answer["redundant"]
    )
    expect(page.locator("#redundant-summary")).to_have_text(
        "dup (tenant wire) holds 4 patterns in amqp; 2 redundant"
    )
    shoot(page, backend, "overlaps")

    # A pattern the API refuses: its status, code and message.
    search.get_by_label("Pattern").fill("a/#/b")
    search.get_by_label("Dialect").select_option("mqtt")
    search.get_by_role("button", name="Search").click()
    refused = admin.get(
        "/v1/subscriptions", params={"overlaps": "a/#/b", "dialect": "mqtt", "tenant": WIRE}
    )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    expect(page.locator("#overlaps-error")).to_have_text(f"400 {error['code']}: {error['message']}")
    expect(page.locator("#overlaps-table")).to_be_hidden()
    context.close()


#: Files the page's import reader must read exactly as the command line's (app.imports):
#: a BOM and a header, CRLF, a quoted comma, a line break in quotes, a literal quote, an
#: empty line, a bad column count, text after a closing quote (the rest is one problem), an
#: unclosed quote, lone CR line ends, an empty quoted subscriber, group columns (a policy
#: conflict, a 7th column).
PARITY_FILES: Final = {
    "mixed.csv": '\ufeffsubscriber,pattern,dialect\r\np1,a.b\r\n"p2, quoted","x.\r\ny"\r\n'
    'p3,a"b\r\n\r\nonly\r\n"p4"x,a\r\np5,z\r\n',
    "unclosed.csv": 'p1,a\n"p2,b\n',
    "cr.csv": 'p1,a\rp2,b\r"",x\r',
    "groups.csv": "g1,jobs.#,amqp,,workers,round_robin\ng2,jobs.#,,,workers,\n"
    "g3,jobs.#,amqp,,workers,hash\ng4,jobs.#,amqp,,workers,round_robin,extra\n",
    "lines.jsonl": '{"subscriber": "j1", "pattern": "a.#"}\n[1]\n\n{"subscriber": "j2", '
    '"pattern": "a.#", "dialect": "mqtt"}\n{"subscriber": NaN}\n{"subscriber": "j3"}\n',
}


def without_json_message(line: str, status: str, code: str, message: str) -> tuple[str, ...]:
    return (line, status, code) if code == "invalid_json" else (line, status, code, message)


def test_import_reads_files_as_the_command_line_does(
    browser: Browser, server: Server, tmp_path: Path
) -> None:
    """The page parses an import file in the browser (the API takes items, not files): its
    per-line results must equal the command line's reader (``app.imports.read_items``)
    followed by the same bulk endpoint, line for line, code for code."""
    expect.set_options(timeout=WAIT_MS)
    admin = server.client(ADMIN_HEADERS)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    page.locator("header").get_by_label("Tenant").fill("parity-ui")
    page.locator("header").get_by_label("Tenant").press("Enter")
    expect(page.locator("#counts")).to_contain_text("tenant parity-ui")
    for name, text in PARITY_FILES.items():
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8"))
        items, problems = read_items(path)
        response = admin.post(
            "/v1/subscriptions/bulk",
            json={"items": [{**item, "tenant": "parity-cli"} for _, item in items]},
        )
        expected = [(str(p["line"]), "error", str(p["code"]), str(p["message"])) for p in problems]
        for (line, _), result in zip(items, response.json()["results"], strict=True):
            error = result.get("error") or {"code": "", "message": ""}
            expected.append((str(line), result["status"], error["code"], error["message"]))
        expected.sort(key=lambda row: int(row[0]))

        page.locator("#import-form").get_by_label("File").set_input_files(str(path))
        page.locator("#import-form").get_by_role("button", name="Import").click()
        expect(page.locator("#import-summary")).to_contain_text(f"{name}: ")
        page.get_by_label("Show the stored lines too").check()
        shown = page.locator("#import-table tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))"
        )
        # A JSON parser's own words differ between Python and the browser; the code does not.
        assert [without_json_message(*row[:2], *row[3:]) for row in shown] == [
            without_json_message(*row) for row in expected
        ], name
    context.close()


def test_audit_page_filters_and_pages(
    browser: Browser, server: Server, request: pytest.FixtureRequest
) -> None:
    """The Audit page against ``GET /v1/audit`` on a tenant of its own: keyset pages,
    the action filter, a time range started by clicking a row's time, Refresh, and a
    refused range shown with the API's code and message."""
    backend = backend_of(request)
    expect.set_options(timeout=WAIT_MS)
    admin = server.client(ADMIN_HEADERS)
    tenant = "audit-pages"
    ids = []
    for i in range(27):
        created = admin.post(
            "/v1/subscriptions",
            json={"subscriber": f"p{i:02d}", "pattern": f"p.{i}", "tenant": tenant},
            headers={"X-Request-ID": f"pages-create-{i:02d}"},
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    for i in (3, 10, 20):
        gone = admin.delete(
            f"/v1/subscriptions/{ids[i]}", headers={"X-Request-ID": f"pages-delete-{i:02d}"}
        )
        assert gone.status_code == 204, gone.text
    every = api_audit(admin, tenant=tenant)
    assert [r["request_id"] for r in every] == [f"pages-create-{i:02d}" for i in range(27)] + [
        f"pages-delete-{i:02d}" for i in (3, 10, 20)
    ]

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    log_in(page, server.url, ADMIN)
    page.get_by_role("link", name="Audit").click()
    audit = page.locator("#audit-form")
    pager = page.locator("#page-audit .pager")
    info = page.locator("#audit-info")
    audit.get_by_label("Tenant").fill(tenant)
    audit.get_by_label("Page size").select_option("25")
    audit.get_by_role("button", name="Filter").click()

    def page_info(number: int, rows: list[dict[str, Any]]) -> str:
        return f"page {number} · #{rows[0]['id']}\u2013{rows[-1]['id']} · {len(rows)} rows"

    def shown_request_ids() -> list[str]:
        return [r["request_id"] for r in audit_rows(page)]

    newest = every[::-1]  # the page's default order
    expect(info).to_have_text(page_info(1, newest[:25]))
    assert shown_request_ids() == [r["request_id"] for r in newest[:25]]
    pager.get_by_role("button", name="Next page").click()
    expect(info).to_have_text(page_info(2, newest[25:]))
    assert shown_request_ids() == [r["request_id"] for r in newest[25:]]
    audit.get_by_label("Order").select_option("asc")  # the rest pages oldest first
    audit.get_by_role("button", name="Filter").click()
    expect(info).to_have_text(page_info(1, every[:25]))
    assert shown_request_ids() == [r["request_id"] for r in every[:25]]
    pager.get_by_role("button", name="Next page").click()
    expect(info).to_have_text(page_info(2, every[25:]))
    assert audit_rows(page) == [
        {
            **{k: r[k] for k in ("id", "action", "ids", "tenant", "request_id", "address")},
            "caller": "operator (any tenant)",
            "token": "operator",
        }
        for r in every[25:]
    ]
    expect(pager.get_by_role("button", name="Next page")).to_be_disabled()
    # Refresh reloads the page it is on: a new change shows up at its end.
    late = admin.post(
        "/v1/subscriptions",
        json={"subscriber": "late", "pattern": "late", "tenant": tenant},
        headers={"X-Request-ID": "pages-late"},
    )
    assert late.status_code == 201, late.text
    page.locator("#audit-refresh").click()
    expect(info).to_contain_text("6 rows")
    assert shown_request_ids()[-1] == "pages-late"
    pager.get_by_role("button", name="Previous").click()
    expect(info).to_have_text(page_info(1, every[:25]))
    pager.get_by_role("button", name="Next page").click()
    pager.get_by_role("button", name="First page").click()
    expect(info).to_have_text(page_info(1, every[:25]))

    # One action.
    audit.get_by_label("Action").select_option("delete")
    audit.get_by_role("button", name="Filter").click()
    expect(info).to_contain_text("3 rows")
    assert [r["ids"] for r in audit_rows(page)] == [[ids[3]], [ids[10]], [ids[20]]]
    audit.get_by_label("Action").select_option("")
    audit.get_by_role("button", name="Filter").click()
    expect(info).to_have_text(page_info(1, every[:25]))

    # A time range: from a row's time (clicked), to another's (typed; exclusive).
    start, end = every[10], every[15]
    page.locator(f'#audit-table tr[data-id="{start["id"]}"] td:nth-child(2) button').click()
    expect(audit.get_by_label("From (UTC)")).to_have_value(start["created_at"])
    expect(info).to_contain_text("page 1 · #" + str(start["id"]))
    assert shown_request_ids() == [
        r["request_id"] for r in api_audit(admin, tenant=tenant, **{"from": start["created_at"]})
    ]
    assert shown_request_ids()[:20] == [r["request_id"] for r in every[10:]]
    audit.get_by_label("To (UTC)").fill(end["created_at"])
    audit.get_by_role("button", name="Filter").click()
    expect(info).to_have_text(page_info(1, every[10:15]))
    expect(page.locator("#audit-caption")).to_contain_text(f"to {end['created_at']}")
    shoot(page, backend, "audit-filtered")
    # Typed as the form's placeholder has it (UTC, no offset): sent as an RFC 3339 time.
    audit.get_by_label("To (UTC)").fill(end["created_at"].replace("T", " ").removesuffix("Z"))
    audit.get_by_role("button", name="Filter").click()
    expect(info).to_have_text(page_info(1, every[10:15]))

    # The last hour (by the browser's clock, which is this machine's): every row above.
    page.get_by_role("button", name="Last hour").click()
    expect(audit.get_by_label("To (UTC)")).to_have_value("")
    expect(audit.get_by_label("From (UTC)")).to_have_value(
        re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
    )
    since = audit.get_by_label("From (UTC)").input_value()
    assert since < every[0]["created_at"]
    expect(info).to_have_text(page_info(1, every[:25]))

    # A range the API refuses: its code and message.
    audit.get_by_label("From (UTC)").fill("0001-01-01")
    audit.get_by_role("button", name="Filter").click()
    expect(page.locator("#audit-error")).to_have_text(
        "422 time_out_of_range: from must be written in a year from 1970 to 9998"
    )
    audit.get_by_role("button", name="Clear").click()
    expect(page.locator("#audit-error")).to_be_hidden()
    expect(page.locator("#audit-caption")).to_have_text("Admin changes of every tenant")
    # Every tenant's rows (this module's other tests wrote some too): the API's first page,
    # newest first again (Clear resets the order too).
    first_page = api_audit(admin, limit=50, order="desc")
    expect(info).to_have_text(page_info(1, first_page))
    assert [r["id"] for r in audit_rows(page)] == [r["id"] for r in first_page]
    context.close()


def test_audit_page_shows_a_429_with_its_retry_after(browser: Browser, tmp_path: Path) -> None:
    """Over its tenant's admin rate, the page shows the API's 429 with its Retry-After and
    holds Refresh back that long. A server of its own with a tiny rate (the limiter does not
    depend on the store: DuckDB only)."""
    expect.set_options(timeout=WAIT_MS)
    burst = 8
    started = start_server(
        tmp_path,
        {
            "database_url": f"duckdb:///{tmp_path / 'rate.duckdb'}",
            "admin_token": ADMIN,
            "tenant_tokens": json.dumps(TENANTS),
            "rate_admin": "0.001",
            "rate_admin_burst": str(burst),
        },
    )
    try:
        started.wait_until("/readyz", 200)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        log_in(page, started.url, TOKEN_A)
        page.get_by_role("link", name="Audit").click()
        expect(page.locator("#audit-info")).to_have_text("page 1 · empty")
        # The rest of the tenant's burst, spent by another client of the same tenant.
        other = started.client(A_HEADERS)
        statuses = [other.get("/v1/audit").status_code for _ in range(burst)]
        assert 429 in statuses, statuses
        with page.expect_response(lambda r: "/v1/audit" in r.url) as answer:
            page.locator("#audit-refresh").click()
        assert answer.value.status == 429
        wait = answer.value.headers["retry-after"]
        error = page.locator("#audit-error")
        expect(error).to_contain_text(
            f"429 rate_limited: over the admin rate of 0.001/s (burst {burst}); retry in"
        )
        expect(error.locator("[data-retry-after]")).to_have_text(f"{wait} s")
        expect(page.locator("#audit-refresh")).to_be_disabled()
        shoot(page, "duckdb", "audit-429")
        context.close()
    finally:
        started.stop()


def test_names_the_rule_refuses_show_as_escapes(browser: Browser, tmp_path: Path) -> None:
    """Rows stored before the names' rule (written here behind the service's back) keep
    their names; the console shows each whitespace, control or format character as its
    escape in a marked span, so "\\u202egnp.exe" does not read "exe.png". DuckDB only: the
    rule and the page do not depend on the store."""
    expect.set_options(timeout=WAIT_MS)
    url = f"duckdb:///{tmp_path / 'names.duckdb'}"
    settings = {"database_url": url, "admin_token": ADMIN, "tenant_tokens": json.dumps(TENANTS)}
    started = start_server(tmp_path, settings)
    try:
        with started.client(ADMIN_HEADERS) as admin:
            for subscriber, group in (("evil", None), ("w1", "g"), ("w2", "g")):
                body = {"subscriber": subscriber, "pattern": "jobs.#", "group": group}
                assert admin.post("/v1/subscriptions", json=body).status_code == 201
    finally:
        started.stop()
    database = Database(url)
    try:
        with database.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE subscription SET subscriber = :s WHERE subscriber = 'evil'"),
                {"s": "\u202egnp.exe"},
            )
            conn.execute(
                sa.text('UPDATE subscription SET "group" = :g WHERE "group" IS NOT NULL'),
                {"g": "g\u2066\u00a0x"},
            )
    finally:
        database.dispose()
    started = start_server(tmp_path, settings)
    try:
        started.wait_until("/readyz", 200)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        log_in(page, started.url, ADMIN)
        page.get_by_role("link", name="Subscriptions").click()
        evil = page.locator("#subs-table tbody tr").filter(has_text="gnp.exe")
        expect(evil).to_have_count(1)
        name = evil.locator("td").nth(1)
        expect(name).to_have_text("\\u202egnp.exe")
        expect(name.locator(".unseen")).to_have_attribute("title", "U+202E (not shown as itself)")
        assert "\u202e" not in page.locator("#subs-table").inner_text()
        chip = page.locator("#subs-table .grp").first
        expect(chip).to_contain_text("g\\u2066\\u00a0x")
        expect(chip.locator(".unseen")).to_have_count(2)
        shoot(page, "duckdb", "names-escaped")

        page.get_by_role("link", name="Match tester").click()
        page.get_by_label("Topic", exact=True).fill("jobs.1")
        expect(page.locator("#groups-table tbody")).to_contain_text("g\\u2066\\u00a0x")
        expect(page.locator("#match-summary")).to_contain_text("\\u202egnp.exe")
        for table in ("#match-summary", "#match-table", "#groups-table"):
            text = page.locator(table).inner_text()
            assert not any(c in text for c in "\u202e\u2066\u00a0"), (table, text)
        shoot(page, "duckdb", "names-escaped-match")
        context.close()
    finally:
        started.stop()


#: Columns of the tables on the page narrower than min(what their widest cell needs on one
#: line, 80 px): squeezed. The table's own styles apply to a copy laid out without wrapping.
SQUEEZED_COLUMNS: Final = """() => [...document.querySelectorAll("table.grid")]
  .filter((table) => table.offsetParent !== null && table.tHead)
  .flatMap((table) => {
    const probe = table.cloneNode(true);
    Object.assign(probe.style, { position: "absolute", visibility: "hidden" });
    probe.style.width = "max-content";
    for (const cell of probe.querySelectorAll("th, td")) {
      Object.assign(cell.style, { whiteSpace: "nowrap", wordBreak: "normal", minWidth: "0" });
    }
    table.parentElement.append(probe);
    const natural = [...probe.tHead.rows[0].cells].map((c) => c.getBoundingClientRect().width);
    probe.remove();
    return [...table.tHead.rows[0].cells]
      .map((c, i) => ({
        table: table.id, column: c.textContent,
        width: c.getBoundingClientRect().width, natural: natural[i],
      }))
      .filter((c) => c.width + 0.5 < Math.min(c.natural, 80));
  })"""


def test_make_run_defaults_and_an_800_px_window(browser: Browser, tmp_path: Path) -> None:
    """``make run`` (``topicstore serve --dev``, no setting): the Analytics tab says what to
    run while the default ``data/routed`` holds nothing, and charts it once it does. In an
    800-px window every table keeps each column at least as wide as its content on one line,
    or 80 px (scrolling sideways in its own box, never the page's); the audit log names the
    caller apart from the token."""
    expect.set_options(timeout=WAIT_MS)
    started = start_server(tmp_path, {}, args=["--dev"])
    try:
        started.wait_until("/readyz", 200)
        token = (tmp_path / "data" / "dev-admin-token").read_text(encoding="utf-8").strip()
        with started.client({"Authorization": f"Bearer {token}"}) as admin:
            items = [
                {
                    "subscriber": f"a-rather-long-subscriber-name-{i}",
                    "pattern": f"orders.region-{i}.*.created.#",
                    "labels": {"team": "payments", "env": "production"},
                    "group": "workers" if i % 2 else None,
                }
                for i in range(6)
            ]
            bulk = admin.post("/v1/subscriptions/bulk", json={"items": items})
            assert bulk.json()["created"] == len(items), bulk.text
        context = browser.new_context(viewport={"width": 800, "height": 900})
        page = context.new_page()
        log_in(page, started.url, token)

        def columns_usable(name: str) -> None:
            assert page.locator("table.grid:visible tbody tr").count() > 0, name
            assert page.evaluate(SQUEEZED_COLUMNS) == [], name
            assert page.evaluate("document.documentElement.scrollWidth") <= 800, name
            shoot(page, "duckdb", f"800px-{name}")

        expect(page.locator("#subs-table tbody tr[data-id]")).to_have_count(6)
        columns_usable("subscriptions")
        page.get_by_role("link", name="Match tester").click()
        page.get_by_label("Topic", exact=True).fill("orders.region-1.x.created")
        expect(page.locator("#match-table tbody tr[data-id]")).to_have_count(1)
        columns_usable("match")
        page.get_by_role("link", name="Audit").click()
        expect(page.locator("#audit-table tbody tr[data-id]")).to_have_count(1)
        row = audit_rows(page)[0]
        assert (row["caller"], row["token"]) == ("operator (any tenant)", "operator")
        columns_usable("audit")

        # Analytics: the first visit runs a query; nothing routed yet, so what to run.
        routed, export = tmp_path / "data" / "routed", tmp_path / "data" / "subscriptions.parquet"
        page.get_by_role("link", name="Analytics").click()
        empty = page.locator("#analytics-empty")
        expect(empty).to_have_attribute("data-code", "no_deliveries")
        expect(page.locator("#analytics-empty-text code")).to_have_text(
            [
                f"topicstore export {export}",
                f"topicstore route --messages MESSAGES --out {routed} --subscriptions {export}",
            ]
        )
        expect(page.locator("#analytics-error")).to_be_hidden()
        shoot(page, "duckdb", "800px-analytics-empty")
        write_routed(routed).joinpath("subscriptions.parquet").rename(export)
        page.get_by_role("button", name="Run").click()
        expect(page.locator("#analytics-table tbody tr").first).to_contain_text("alice")
        expect(empty).to_be_hidden()
        columns_usable("analytics")
        page.locator("#analytics-form").get_by_label("Query").select_option("never-matched")
        page.get_by_role("button", name="Run").click()
        expect(page.locator("#analytics-table caption")).to_have_text("never-matched: 2 rows")
        context.close()
    finally:
        started.stop()


# -- without a browser: the routes themselves -----------------------------------------------


def test_console_routes_and_headers(tmp_path: Path) -> None:
    """/ui and its two assets, with a CSP that allows only this origin's script; nothing
    else of the directory is served; /v1/whoami names the caller."""
    settings = make_settings(f"duckdb:///{tmp_path / 'ui.duckdb'}")
    with TestClient(create_app(settings, wait_until_ready=True)) as client:
        page = client.get("/ui")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert '<script type="module" src="/ui/assets/console.js">' in page.text
        assert re.search(r"<script>", page.text) is None  # no inline script
        assert client.get("/ui/", follow_redirects=False).status_code == 308
        js = client.get("/ui/assets/console.js")
        assert js.headers["content-type"].startswith("text/javascript")
        assert "innerHTML" not in js.text  # API values are written as text only
        assert client.get("/ui/assets/index.html").status_code == 422
        assert client.get("/ui/assets/..%2Fconsole.py").status_code in {400, 404, 422}
        assert client.get("/v1/whoami", headers=ADMIN_HEADERS).json() == {
            "role": "operator",
            "tenant": None,
        }
        assert client.get("/v1/whoami", headers=A_HEADERS).json() == {
            "role": "tenant",
            "tenant": "acme",
        }
        assert client.get("/v1/whoami").json()["error"]["code"] == "unauthorized"
        assert "/ui" not in client.get("/openapi.json").json()["paths"]


def test_metrics_count_subscriptions_per_tenant_and_dialect(tmp_path: Path) -> None:
    """The Health page's per-tenant table reads ``topicstore_tenant_subscriptions``: one
    series per (tenant, dialect) in use, headers subscriptions included, gone at zero; the
    operator's token only."""
    settings = make_settings(f"duckdb:///{tmp_path / 'sizes.duckdb'}")
    with TestClient(create_app(settings, wait_until_ready=True)) as client:
        for headers, body in [
            (A_HEADERS, {"subscriber": "q", "pattern": "a.#"}),
            (A_HEADERS, {"subscriber": "q", "pattern": "b.*"}),
            (A_HEADERS, {"subscriber": "q", "pattern": "a/+", "dialect": "mqtt"}),
            (
                B_HEADERS,
                {"subscriber": "h", "kind": "headers", "criteria": {"k": None}, "mode": "any"},
            ),
        ]:
            assert client.post("/v1/subscriptions", json=body, headers=headers).status_code == 201
        gone = client.post(
            "/v1/subscriptions", json={"subscriber": "x", "pattern": "x"}, headers=B_HEADERS
        ).json()["id"]
        assert client.delete(f"/v1/subscriptions/{gone}", headers=B_HEADERS).status_code == 204
        series = re.findall(
            r'^topicstore_tenant_subscriptions\{dialect="(\w+)",tenant="(\w+)"\} (\S+)$',
            client.get("/metrics", headers=ADMIN_HEADERS).text,
            re.M,
        )
        # Per-tenant series go to the operator only: a tenant or a bare scrape gets none.
        for headers in ({}, A_HEADERS):
            scraped = client.get("/metrics", headers=headers).text
            assert "topicstore_tenant_subscriptions" not in scraped
        assert series == [
            ("amqp", "acme", "2.0"),
            ("mqtt", "acme", "1.0"),
            ("headers", "globex", "1.0"),
        ]


def test_the_wheel_ships_the_console_files() -> None:
    """The image installs a wheel: every file of console_static/ must be package data."""
    root = Path(__file__).resolve().parents[2]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["app"]
    files = sorted(p.relative_to(root / "app") for p in (root / "app/console_static").iterdir())
    assert [p.name for p in files] == ["console.css", "console.js", "index.html"]
    for path in files:
        assert any(path.match(pattern) for pattern in globs), f"{path} is not package data"
