"""The repository on real PostgreSQL and a real DuckDB file, through the write transaction."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from matcher import InvalidPatternError
from store import (
    Database,
    InvalidSubscriptionError,
    NewSubscription,
    SubscriptionRepository,
    columns,
    validate,
)
from store.export import export_parquet
from store.records import Removals
from store.selection import Selection


def _add(db: Database, *items: NewSubscription) -> list[tuple[int, bool]]:
    with db.write() as session:
        repo = SubscriptionRepository(session)
        return [(row.id, created) for row, created in (repo.add(validate(i)) for i in items)]


def test_add_is_idempotent_per_tenant_subscriber_dialect_pattern(database: Database) -> None:
    (first, created), (again, created_again) = _add(
        database, NewSubscription("q1", "a.*"), NewSubscription("q1", "a.*")
    )
    assert created and not created_again and again == first
    others = _add(
        database,
        NewSubscription("q2", "a.*"),
        NewSubscription("q1", "a.*", tenant="t2"),
        NewSubscription("q1", "a/+", dialect="mqtt"),
    )
    assert all(created for _, created in others)
    assert len({first, *(i for i, _ in others)}) == 4
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert repo.count() == {"amqp": 3, "mqtt": 1}
        assert repo.count("t2") == {"amqp": 1}
        # one change per created row, in order
        assert [c.op for c in repo.changes_since(0)] == ["add"] * 4
        assert [c.subscription_id for c in repo.changes_since(0)] == [
            first,
            *(i for i, _ in others),
        ]


def test_repeating_a_subscription_draws_no_id(database: Database) -> None:
    """The existing row is found before inserting, so no sequence value is spent on a
    repeat (ids 6 and 11 were once skipped within minutes of first use)."""
    (first, _), (again, created), (second, _) = _add(
        database, NewSubscription("q", "a"), NewSubscription("q", "a"), NewSubscription("q", "b")
    )
    assert (again, created) == (first, False)
    assert second == first + 1
    with database.write() as session:
        stored = (
            SubscriptionRepository(session)
            .add_many([validate(NewSubscription("q", p)) for p in ("a", "c", "c", "b", "d")])
            .items
        )
    assert stored == [
        (first, False),
        (second + 1, True),
        (second + 1, False),
        (second, False),
        (second + 2, True),
    ]
    ((third, created),) = _add(database, NewSubscription("q", "e"))
    assert created and third == second + 3


def test_tab_is_the_one_control_character_kept_in_patterns() -> None:
    assert validate(NewSubscription("q", "a\tb")).pattern == "a\tb"
    with pytest.raises(InvalidSubscriptionError) as caught:
        validate(NewSubscription("q\tr", "a"))  # a name holds no whitespace at all
    assert caught.value.code == "whitespace_character"


def test_headers_subscriptions_are_unique_by_criteria(database: Database) -> None:
    new = NewSubscription("q", kind="headers", criteria=(("b", None), ("a", "1")), mode="all")
    same = NewSubscription("q", kind="headers", criteria=(("a", "1"), ("b", None)), mode="all")
    other = NewSubscription("q", kind="headers", criteria=(("a", "1"), ("b", None)), mode="any")
    (a, _), (b, created), (c, _) = _add(database, new, same, other)
    assert a == b and not created and c != a
    with database.read() as session:
        row = SubscriptionRepository(session).get(a)
    assert row is not None and row.criteria == (("a", "1"), ("b", None)) and row.mode == "all"


def test_bulk_add_reports_every_item(database: Database) -> None:
    _add(database, NewSubscription("s", "x.1"))
    items = [validate(NewSubscription("s", f"x.{i}", labels={"i": i})) for i in range(500)]
    items.append(items[3])  # a duplicate inside the batch
    with database.write() as session:
        added = SubscriptionRepository(session).add_many(items)
    results = added.items
    assert results is not None and len(results) == len(items)
    assert added.count == 499 and sorted(added.created["default"]) == added.created["default"]
    assert results[1] == (1, False)  # x.1 existed before
    assert results[-1][0] == results[3][0] and not results[-1][1]
    assert sum(created for _, created in results) == 499
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert repo.count() == {"amqp": 500}
        changes = repo.changes_since(0)
        assert len(changes) == 500 and len({c.subscription_id for c in changes}) == 500
        stored = repo.get(results[7][0])
        assert stored is not None and stored.pattern == "x.7" and stored.labels == {"i": 7}


def test_remove_and_tenant_isolation(database: Database) -> None:
    ids = [
        i
        for i, _ in _add(
            database,
            NewSubscription("q1", "a"),
            NewSubscription("q1", "b"),
            NewSubscription("q2", "c"),
            NewSubscription("q1", "d", tenant="other"),
        )
    ]
    with database.write() as session:
        repo = SubscriptionRepository(session)
        assert repo.get(ids[3], tenant="default") is None  # another tenant's row
        assert not repo.remove(ids[3], tenant="default")
        assert repo.remove(ids[2])
        assert not repo.remove(ids[2])
        assert repo.remove_selection(Selection("default", "q1")) == ({"default": ids[:2]}, False)
    with database.read() as session:
        repo = SubscriptionRepository(session)
        assert repo.count() == {"amqp": 1}
        removes = [c for c in repo.changes_since(4)]
        assert [(c.op, c.subscription_id) for c in removes] == [
            ("remove", ids[2]),
            ("remove", ids[0]),
            ("remove", ids[1]),
        ]
        assert removes[0].pattern == "c" and removes[0].subscriber == "q2"


def test_a_bounded_removal_takes_the_lowest_ids_of_its_selection(database: Database) -> None:
    """A selection by label, prefix, group or dialect within one tenant: at most ``limit``
    rows, the lowest ids first, ``more`` while it holds others; a listing with the same
    selection shows what is left; the tenant's usage follows."""
    items = [NewSubscription(f"q{k % 3}", f"a.{k}", labels={"team": "x"}) for k in range(5)]
    items += [
        NewSubscription("q9", "a.9", labels={"team": "y"}),
        NewSubscription("q9", "b.1", labels={"team": "x"}, tenant="other"),
        NewSubscription("g1", "a.g", group="workers", group_policy="random"),
        NewSubscription("m1", "a/m", dialect="mqtt"),
    ]
    ids = [i for i, _ in _add(database, *items)]
    team_x = Selection("default", label=("team", "x"))
    with database.write() as session:
        repo = SubscriptionRepository(session)
        assert repo.remove_selection(team_x, limit=2) == ({"default": ids[:2]}, True)
        assert repo.remove_selection(team_x, limit=3) == ({"default": ids[2:5]}, False)
        assert repo.remove_selection(team_x, limit=3) == ({}, False)
        assert [r.id for r in repo.page(tenant="default", label=("team", "x"))] == []
        group = Selection("default", group="workers", pattern_prefix="a.")
        assert repo.remove_selection(group, limit=1) == ({"default": [ids[7]]}, False)
        assert repo.remove_selection(Selection("default", dialect="mqtt")) == (
            {"default": [ids[8]]},
            False,
        )
        assert repo.usage("default") == 1 and repo.usage("other") == 1
    with database.read() as session:
        kept = SubscriptionRepository(session).page(limit=10)
        assert [r.id for r in kept] == [ids[5], ids[6]]


def test_changes_in_reads_runs_of_removes_as_ids(database: Database) -> None:
    """A loader's read of a window of the log: adds as full changes, each run of removes
    between them as one ``Removals`` of its seqs and ids, in seq order; the window's
    bounds hold (``after`` excluded, ``upto`` included)."""
    ids = [i for i, _ in _add(database, *(NewSubscription("q1", f"p{k}") for k in range(4)))]
    with database.write() as session:
        removed, more = SubscriptionRepository(session).remove_selection(Selection("default", "q1"))
        assert removed == {"default": ids} and not more
    (late,) = [i for i, _ in _add(database, NewSubscription("q2", "z"))]
    with database.write() as session:
        assert SubscriptionRepository(session).remove(ids[0]) is None
        assert SubscriptionRepository(session).remove(late) is not None
    with database.read() as session:
        repo = SubscriptionRepository(session)
        every = repo.changes_since(0)
        seqs = [c.seq for c in every]
        assert [c.op for c in every] == ["add"] * 4 + ["remove"] * 4 + ["add", "remove"]
        read = repo.changes_in(seqs[2], seqs[-1])
        assert read == [
            every[3],
            Removals(seqs[4:8], ids),
            every[8],
            Removals(seqs[9:], [late]),
        ]
        assert repo.changes_in(seqs[4], seqs[6]) == [Removals(seqs[5:7], ids[1:3])]
        assert repo.changes_in(seqs[-1], seqs[-1] + 10) == []


def test_list_filters_and_keyset_pagination(database: Database) -> None:
    items = [NewSubscription(f"s{i % 3}", f"p{i % 5}.x.{i}", dialect="amqp") for i in range(40)]
    items += [NewSubscription("s0", "m/+", dialect="mqtt")]
    with database.write() as session:
        SubscriptionRepository(session).add_many([validate(i) for i in items])
    with database.read() as session:
        repo = SubscriptionRepository(session)
        seen: list[int] = []
        after = None
        while page := repo.page(after_id=after, limit=7):
            seen += [row.id for row in page]
            after = page[-1].id
        assert seen == sorted(seen) and len(seen) == 41
        assert {r.subscriber for r in repo.page(subscriber="s1", limit=100)} == {"s1"}
        assert len(repo.page(subscriber="s1", limit=100)) == 13
        assert {r.pattern[:2] for r in repo.page(pattern_prefix="p3", limit=100)} == {"p3"}
        assert [r.dialect for r in repo.page(dialect="mqtt")] == ["mqtt"]
        assert len(list(repo.stream_all(batch_size=8))) == 41


@pytest.mark.parametrize(
    ("new", "code"),
    [
        (NewSubscription("", "a"), "empty_subscriber"),
        (NewSubscription("q", "a", tenant=""), "empty_tenant"),
        (NewSubscription("q" * 300, "a"), "subscriber_too_long"),
        (NewSubscription("q", "a\x00"), "nul_byte"),
        (NewSubscription("q", "a/#/b", dialect="mqtt"), "invalid_wildcard"),
        (NewSubscription("q", "a", dialect="stomp"), "invalid_dialect"),
        (NewSubscription("q", kind="headers"), "missing_criteria"),
        (NewSubscription("q\nr", "a"), "control_character"),
        (NewSubscription("q", "a", tenant="t\r"), "control_character"),
        (NewSubscription("q", "a.\x1b[2J"), "control_character"),
        (NewSubscription("q", "a\x1f"), "control_character"),
        (
            NewSubscription("q", "a", labels={f"k{i}": "v" * 100 for i in range(50)}),
            "labels_too_large",
        ),
        (NewSubscription("q", "a", labels={"k": "v" * 5000}), "label_too_long"),
        (NewSubscription("q", "a", labels={"k": "v\x00"}), "nul_byte"),
        (NewSubscription("q", "a", labels={"k": [float("inf")]}), "invalid_number"),
        (NewSubscription("q", "a", labels={"k\ud800": 1}), "lone_surrogate"),
        (NewSubscription("q", "a", labels={"k": [[[[[[[[[1]]]]]]]]]}), "labels_too_deep"),
    ],
)
def test_validation_names_the_rule(new: NewSubscription, code: str) -> None:
    with pytest.raises((InvalidSubscriptionError, InvalidPatternError)) as info:
        validate(new)
    error = info.value
    assert isinstance(error, InvalidSubscriptionError | InvalidPatternError)
    assert error.code == code


def test_export_parquet_round_trips(database: Database, tmp_path: Path) -> None:
    items = [NewSubscription(f"s{i}", f"e.{i}.#", labels={"n": i}) for i in range(30)]
    items.append(NewSubscription("h", kind="headers", criteria=(("k", None),), mode="any"))
    items.append(NewSubscription("x", "other", tenant="t2"))
    with database.write() as session:
        SubscriptionRepository(session).add_many([validate(i) for i in items])
    path = tmp_path / "out" / "subs.parquet"
    assert export_parquet(database, path) == 32
    table = pq.read_table(path).to_pylist()
    assert [r["pattern"] for r in table[:3]] == ["e.0.#", "e.1.#", "e.2.#"]
    assert json.loads(table[5]["labels"]) == {"n": 5}
    headers = next(r for r in table if r["kind"] == "headers")
    assert json.loads(headers["criteria"]) == [["k", None]] and headers["mode"] == "any"
    assert export_parquet(database, path, tenant="t2") == 1
    assert pq.read_table(path).column("subscriber").to_pylist() == ["x"]
    assert export_parquet(database, path, tenant="nobody") == 0
    assert pq.read_table(path).num_rows == 0


_ODD_ROWS = [
    ("t", "q,1", 'a."quoted".#', "amqp"),
    ("t", "tab\there", "ü.*.ß", "amqp"),
    ("other", "q3", "x/+/y", "mqtt"),
    ("t", "q4", "", "amqp"),
    ("t", "q5", "z.>", "nats"),
]


def _insert_by_hand(db: Database, rows: list[tuple[str, str, str, str]]) -> None:
    """Rows written by SQL, past validation (what a hand-edited store may hold)."""
    with db.engine.begin() as conn:
        for row in rows:
            conn.exec_driver_sql(
                "INSERT INTO subscription (tenant, subscriber, pattern, dialect) "
                "VALUES (?, ?, ?, ?)"
                if conn.dialect.name == "duckdb"
                else "INSERT INTO subscription (tenant, subscriber, pattern, dialect) "
                "VALUES (%s, %s, %s, %s)",
                row,
            )


def _columns(db: Database) -> list[tuple[int, str, str, str, str]]:
    with db.read() as session:
        table = SubscriptionRepository(session).columns(datetime.now(UTC))
    assert table.column_names == ["id", "tenant", "subscriber", "dialect", "pattern"]
    return list(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))


@pytest.mark.parametrize("chunk_rows", [2, 65_536])
def test_columns_reads_every_row_exactly(
    database: Database, chunk_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The startup read, in id order, text as stored (quotes, commas, tab, non-ASCII, an
    empty pattern); on PostgreSQL across several statements when chunks are small."""
    monkeypatch.setattr(columns, "_CHUNK_ROWS", chunk_rows)
    assert _columns(database) == []
    _insert_by_hand(database, _ODD_ROWS)
    expected = [(i, t, s, d, p) for i, (t, s, p, d) in enumerate(_ODD_ROWS, start=1)]
    assert _columns(database) == expected


@pytest.mark.parametrize(
    "odd",
    [
        ("t", "q", "a.b\n", "amqp"),  # a trailing line break: an empty line after it
        ("t", "q\n2\x1ft\x1fs\x1fd\x1fp", "a", "amqp"),  # a forged second line
        ("t", "q\x1fr", "a", "amqp"),  # the separator
        ("t", "q", "a\r", "amqp"),
    ],
)
def test_columns_is_exact_for_text_validation_refuses(
    database: Database, odd: tuple[str, str, str, str]
) -> None:
    """A row holding a line break or the chunked read's separator (refused by validation,
    but a row written by hand may): the read falls back to the quoted CSV and stays exact."""
    _insert_by_hand(database, [_ODD_ROWS[0], odd, _ODD_ROWS[2]])
    rows = [_ODD_ROWS[0], odd, _ODD_ROWS[2]]
    assert _columns(database) == [(i, t, s, d, p) for i, (t, s, p, d) in enumerate(rows, start=1)]
