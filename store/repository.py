"""The subscription repository: builds statements on a session it is given, never commits.

Callers write inside ``Database.write()`` (serialized writers, so change_log sequence
numbers commit in order) and commit there. Every add and remove also appends a change_log
row in the same transaction and, on PostgreSQL, rings the ``topicstore_changes`` doorbell
(delivered only if the transaction commits).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.csv as pa_csv
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from matcher.groups import Policy, check_policy
from store.db import CHANGES_CHANNEL
from store.models import ChangeLog, Subscription
from store.records import Change, NewSubscription, StoredSubscription, criteria_tuple

_SUBSCRIPTION: Final = Subscription.__table__
#: Columns a new subscription sets (the others, id and created_at, the database fills).
_NEW_COLUMNS: Final = tuple(
    c.name for c in _SUBSCRIPTION.columns if c.name in NewSubscription.__dataclass_fields__
)
#: Columns copied from a subscription into its change_log rows.
_CHANGE_COLUMNS: Final = tuple(name for name in _NEW_COLUMNS if name in ChangeLog.__table__.columns)
_JSON_COLUMNS: Final = frozenset(
    c.name for c in _SUBSCRIPTION.columns if isinstance(c.type, sa.JSON)
)
_STORED_FIELDS: Final = tuple(StoredSubscription.__dataclass_fields__)
MAX_PAGE: Final = 1_000
#: What a loader builds from (``columns``).
_COLUMN_NAMES: Final = ("id", "tenant", "subscriber", "dialect", "pattern")
_COLUMNS_SCHEMA: Final = pa.schema(
    [("id", pa.int64()), *((name, pa.string()) for name in _COLUMN_NAMES[1:])]
)
#: The PostgreSQL startup read (``_postgres_chunks``): rows per statement, the field
#: separator (a control character: refused in names and patterns), the statement, and how
#: Arrow splits its answer (no quoting, and an empty line is a line: see there).
_CHUNK_ROWS: Final = 65_536
_SEPARATOR: Final = "\x1f"
_CHUNK_QUERY: Final = (
    "SELECT count(*), max(id), convert_to(string_agg(concat_ws(E'\\x1f', "
    + ", ".join(_COLUMN_NAMES)
    + ", ''), E'\\n'), 'UTF8') FROM (SELECT "
    + ", ".join(_COLUMN_NAMES)
    + " FROM subscription WHERE id > %s ORDER BY id LIMIT %s) AS chunk"
)
_CHUNK_FIELDS: Final = (*_COLUMN_NAMES, "end")
_CHUNK_PARSE: Final = pa_csv.ParseOptions(
    delimiter=_SEPARATOR,
    quote_char=False,
    double_quote=False,
    escape_char=False,
    ignore_empty_lines=False,
)
#: What makes a subscription unique (the unique constraint), in SQL over ``st`` (staging)
#: and ``s`` (subscription).
_KEY_COLUMNS: Final = ("tenant", "subscriber", "dialect", "pattern")
#: Column names as SQL text, quoted where they are reserved words ("group").
_QUOTE: Final = postgresql.dialect().identifier_preparer.quote  # type: ignore[no-untyped-call]
_KEY: Final = ", ".join(_KEY_COLUMNS)
_SAME_KEY: Final = " AND ".join(f"s.{c} = st.{c}" for c in _KEY_COLUMNS)
#: The inserts look the key up first and writers are serialized, so a conflict cannot
#: happen; on PostgreSQL ``ON CONFLICT DO NOTHING`` stays as a cheap guard. DuckDB (1.5)
#: checks every row of an ``ON CONFLICT`` insert against the unique index far more slowly
#: than a plain insert checks it: a batch of 1,000 new rows into 200k took 2.2 s with the
#: clause and 0.04 s without (``topicstore sub import`` of 1M rows went from about 25 min,
#: quadratic, to linear), and one new row 16 ms against 2.7 ms.
_ON_CONFLICT: Final = " ON CONFLICT DO NOTHING"


def _stored(row: Subscription) -> StoredSubscription:
    values = {name: getattr(row, name) for name in _STORED_FIELDS}
    values["criteria"] = criteria_tuple(row.criteria)
    return StoredSubscription(**values)


def _values(new: NewSubscription) -> dict[str, Any]:
    """Column values of ``new``; criteria pairs as JSON lists."""
    values = {name: getattr(new, name) for name in _NEW_COLUMNS}
    if new.criteria is not None:
        values["criteria"] = [list(c) for c in new.criteria]
    return values


def _change(seq: int, op: str, sub_id: int, row: Any) -> Change:
    """A ``Change`` from a row holding the ``_CHANGE_COLUMNS`` (by attribute)."""
    values = {name: getattr(row, name) for name in _CHANGE_COLUMNS}
    values["criteria"] = criteria_tuple(values["criteria"])
    return Change(seq=seq, op=op, subscription_id=sub_id, **values)  # type: ignore[arg-type]


class SubscriptionRepository:
    """Reads and writes subscriptions on ``session`` (validated input: see ``validate``)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._postgres = session.get_bind().dialect.name == "postgresql"

    # -- writes -------------------------------------------------------------------------

    def add(self, new: NewSubscription) -> tuple[StoredSubscription, bool]:
        """Create ``new``; if the same (tenant, subscriber, dialect, pattern) exists, return
        that row instead. The flag says whether a row was created.

        The existing row is looked up first: an insert that conflicts has already drawn an
        id from the sequence, so repeating a subscription would skip ids. (Writers are
        serialized, so nothing can insert the row between the look-up and the insert; the
        ``ON CONFLICT`` stays as a guard on PostgreSQL: see ``_ON_CONFLICT``.)"""
        existing = self._existing_id(new)
        inserted = None
        if existing is None:
            insert = pg_insert(Subscription).values(**_values(new))
            if self._postgres:  # see _ON_CONFLICT
                insert = insert.on_conflict_do_nothing()
            inserted = self.session.execute(insert.returning(Subscription.id)).scalar()
        sub_id = inserted if inserted is not None else self._existing_id(new)
        row = self.session.get(Subscription, sub_id)
        assert row is not None
        if inserted is not None:
            self._log("add", sa.select(Subscription).where(Subscription.id == sub_id))
        return _stored(row), inserted is not None

    def add_many(self, items: Sequence[NewSubscription]) -> list[tuple[int, bool]]:
        """Create every item in one statement; returns (id, created) per item, in order.

        Rows go to a staging table first (COPY on PostgreSQL), then one
        ``INSERT ... SELECT`` of the first of each key that is not stored yet: duplicates,
        in the batch or already stored, resolve to the existing id without drawing one from
        the sequence (a conflicting insert would, and skip it).
        """
        if not items:
            return []
        session = self.session
        before = session.execute(sa.select(sa.func.coalesce(sa.func.max(Subscription.id), 0)))
        max_before = int(before.scalar_one())
        self._stage(items)
        columns = ", ".join(map(_QUOTE, _NEW_COLUMNS))
        session.execute(
            sa.text(
                f"INSERT INTO subscription ({columns}) SELECT {columns} FROM ("
                f"SELECT *, row_number() OVER (PARTITION BY {_KEY} ORDER BY ord) AS nth "
                "FROM staging) st WHERE nth = 1 AND NOT EXISTS (SELECT 1 FROM subscription s "
                f"WHERE {_SAME_KEY}) ORDER BY ord{_ON_CONFLICT if self._postgres else ''}"
            )
        )
        # Writers are serialized and ids come from a sequence: the new rows are exactly
        # those above the previous maximum.
        self._log("add", sa.select(Subscription).where(Subscription.id > max_before))
        # Each item's id: usually every item is new, and the join need only read the rows
        # just inserted (an id range: zone maps on DuckDB, the primary key on PostgreSQL),
        # not the whole table (which made a 1M-row import quadratic). An item already stored
        # is missing from that answer, and then the whole table is joined.
        joined = f"SELECT st.ord, s.id FROM staging st JOIN subscription s ON {_SAME_KEY}"
        rows = session.execute(
            sa.text(f"{joined} WHERE s.id > :max_before ORDER BY st.ord"),
            {"max_before": max_before},
        ).all()
        if len(rows) != len(items):
            rows = session.execute(sa.text(f"{joined} ORDER BY st.ord")).all()
        session.execute(sa.text("DROP TABLE staging"))
        result: list[tuple[int, bool]] = []
        first_seen: set[int] = set()
        for _, sub_id in rows:
            created = sub_id > max_before and sub_id not in first_seen
            first_seen.add(sub_id)
            result.append((sub_id, created))
        return result

    def remove(self, sub_id: int, tenant: str | None = None) -> bool:
        """Delete subscription ``sub_id`` (of ``tenant``, when given); False if absent."""
        where = [Subscription.id == sub_id]
        if tenant is not None:
            where.append(Subscription.tenant == tenant)
        return bool(self._remove_where(*where))

    def remove_subscriber(self, tenant: str, subscriber: str) -> list[int]:
        """Delete every subscription of ``subscriber``; returns their ids."""
        return self._remove_where(
            Subscription.tenant == tenant, Subscription.subscriber == subscriber
        )

    def _remove_where(self, *where: sa.ColumnElement[bool]) -> list[int]:
        self._log("remove", sa.select(Subscription).where(*where))
        deleted = self.session.execute(
            sa.delete(Subscription).where(*where).returning(Subscription.id)
        )
        return sorted(deleted.scalars())

    def _existing_id(self, new: NewSubscription) -> int | None:
        return self.session.execute(
            sa.select(Subscription.id).where(
                Subscription.tenant == new.tenant,
                Subscription.subscriber == new.subscriber,
                Subscription.dialect == new.dialect,
                Subscription.pattern == new.pattern,
            )
        ).scalar()

    def _log(self, op: str, rows: sa.Select[Any]) -> None:
        """Append a change for each row ``rows`` selects, in id order, and ring the bell."""
        source = rows.subquery()
        selected = sa.select(
            sa.literal(op), source.c.id, *(source.c[name] for name in _CHANGE_COLUMNS)
        ).order_by(source.c.id)
        self.session.execute(
            sa.insert(ChangeLog).from_select(["op", "subscription_id", *_CHANGE_COLUMNS], selected)
        )
        if self._postgres:
            self.session.execute(
                sa.text("SELECT pg_notify(:channel, (SELECT max(seq) FROM change_log)::text)"),
                {"channel": CHANGES_CHANNEL},
            )

    def _stage(self, items: Sequence[NewSubscription]) -> None:
        """Rows of ``items`` into a temporary ``staging`` table with the subscription
        columns' own types (plus ``ord``, the item's position)."""
        session = self.session
        dialect = session.get_bind().dialect
        columns = ", ".join(
            f"{_QUOTE(name)} {_SUBSCRIPTION.c[name].type.compile(dialect=dialect)}"
            for name in _NEW_COLUMNS
        )
        session.execute(sa.text(f"CREATE TEMPORARY TABLE staging (ord BIGINT, {columns})"))
        rows = [
            (
                i,
                *(
                    json.dumps(v[name])
                    if name in _JSON_COLUMNS and v[name] is not None
                    else v[name]
                    for name in _NEW_COLUMNS
                ),
            )
            for i, v in enumerate(map(_values, items))
        ]
        raw = session.connection().connection.driver_connection
        assert raw is not None
        if self._postgres:
            with raw.cursor() as cursor, cursor.copy("COPY staging FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            # DuckDB reads an Arrow table in one vectorized insert (executemany is per row).
            names = ("ord", *_NEW_COLUMNS)
            arrays = dict(zip(names, zip(*rows, strict=True), strict=True))
            raw.register("staging_rows", pa.table(arrays))
            try:
                raw.execute("INSERT INTO staging SELECT * FROM staging_rows")
            finally:
                raw.unregister("staging_rows")

    # -- reads --------------------------------------------------------------------------

    def get(self, sub_id: int, tenant: str | None = None) -> StoredSubscription | None:
        row = self.session.get(Subscription, sub_id)
        if row is None or (tenant is not None and row.tenant != tenant):
            return None
        return _stored(row)

    def page(
        self,
        *,
        tenant: str | None = None,
        subscriber: str | None = None,
        pattern_prefix: str | None = None,
        dialect: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
        ids: Sequence[int] | None = None,
        group: str | None = None,
        label: tuple[str, str] | None = None,
    ) -> list[StoredSubscription]:
        """A page of subscriptions in id order, starting after ``after_id`` (keyset
        pagination: stable under concurrent writes, O(page) at any depth); ``ids``: only
        those (at most a page of them); ``group``: members of that shared-subscription
        group; ``label``: (key, value) the labels hold, the value compared as text."""
        query = sa.select(Subscription).order_by(Subscription.id).limit(min(limit, MAX_PAGE))
        if tenant is not None:
            query = query.where(Subscription.tenant == tenant)
        if subscriber is not None:
            query = query.where(Subscription.subscriber == subscriber)
        if dialect is not None:
            query = query.where(Subscription.dialect == dialect)
        if pattern_prefix:
            query = query.where(
                sa.func.substr(Subscription.pattern, 1, len(pattern_prefix)) == pattern_prefix
            )
        if group is not None:
            query = query.where(Subscription.group == group)
        if label is not None:
            key, value = label
            query = query.where(Subscription.labels[key].as_string() == value)
        if after_id is not None:
            query = query.where(Subscription.id > after_id)
        if ids is not None:
            if not ids:
                return []
            query = query.where(Subscription.id.in_(list(ids)[:MAX_PAGE]))
        return [_stored(row) for row in self.session.scalars(query)]

    def count(self, tenant: str | None = None) -> dict[str, int]:
        """Subscription counts per dialect (``headers`` for content-based ones)."""
        query = sa.select(Subscription.dialect, sa.func.count()).group_by(Subscription.dialect)
        if tenant is not None:
            query = query.where(Subscription.tenant == tenant)
        return {dialect: int(n) for dialect, n in self.session.execute(query)}

    def stream_all(self, batch_size: int = 10_000) -> Iterator[Change]:
        """Every subscription, as ``add`` changes (seq 0), streamed in batches (a server-side
        cursor on PostgreSQL), for building matchers without holding every row at once.
        Core, not ORM: no identity map or entity rows for a million subscriptions."""
        table = Subscription.__table__
        query = sa.select(table.c.id, *(table.c[n] for n in _CHANGE_COLUMNS)).order_by(table.c.id)
        result = (
            self.session.connection()
            .execution_options(stream_results=True, yield_per=batch_size)
            .execute(query)
        )
        for sub_id, tenant, subscriber, pattern, dialect, kind, criteria, mode, *grouped in result:
            yield Change(
                0,
                "add",
                sub_id,
                tenant,
                subscriber,
                pattern,
                dialect,
                kind,
                None if criteria is None else criteria_tuple(criteria),
                mode,
                *grouped,
            )

    def columns(self) -> pa.Table:
        """Every subscription's id, tenant, subscriber, dialect and pattern as one Arrow
        table in id order, read without a Python object per row. DuckDB gives its own Arrow
        result. PostgreSQL aggregates ``_CHUNK_ROWS`` rows at a time into one text value,
        parsed by Arrow (``_postgres_chunks``). Runs on the session's transaction, so it
        sees the same snapshot as its other reads."""
        raw = self.session.connection().connection.driver_connection
        assert raw is not None
        if not self._postgres:
            query = f"SELECT {', '.join(_COLUMN_NAMES)} FROM subscription ORDER BY id"
            # In chunks, combined into one copy in Arrow's pool: DuckDB's own buffers are
            # then all freed here, and its allocator hands them back (store.db).
            result: pa.Table = raw.execute(query).to_arrow_table(_CHUNK_ROWS)
            return result.cast(_COLUMNS_SCHEMA).combine_chunks()
        chunks = _postgres_chunks(raw)
        if chunks is None:
            chunks = [_postgres_csv(raw)]
        return pa.concat_tables(chunks) if chunks else _COLUMNS_SCHEMA.empty_table()

    def range_stats(
        self, bucket: int, low: int = 0, high: int | None = None
    ) -> dict[int, tuple[int, int, int]]:
        """Per id range (``id // bucket``) of the ids in ``[low, high)`` (``high`` None: no
        upper bound): rows, sum of ids, and the summed lengths of tenant, subscriber,
        dialect and pattern; ``loader.catalog.Catalog.range_stats`` computes the same in
        memory, and only ranges that differ are read row by row. A bounded window is an
        index range scan, so a check can be spread over several small queries."""
        # (id - id % b) / b: exact on both backends (DuckDB's '/' divides as a double).
        key = sa.cast((Subscription.id - Subscription.id % bucket) / bucket, sa.BigInteger)
        lengths = (
            sa.func.length(Subscription.tenant)
            + sa.func.length(Subscription.subscriber)
            + sa.func.length(Subscription.dialect)
            + sa.func.length(Subscription.pattern)
        )
        query = (
            sa.select(key, sa.func.count(), sa.func.sum(Subscription.id), sa.func.sum(lengths))
            .where(Subscription.id >= low)
            .group_by(key)
        )
        if high is not None:
            query = query.where(Subscription.id < high)
        return {
            int(k): (int(n), int(ids), int(total))
            for k, n, ids, total in self.session.execute(query)
        }

    def between(self, low: int, high: int) -> list[Change]:
        """Subscriptions with ``low <= id < high``, as ``add`` changes (seq 0)."""
        table = Subscription.__table__
        query = (
            sa.select(table.c.id, *(table.c[n] for n in _CHANGE_COLUMNS))
            .where(table.c.id >= low, table.c.id < high)
            .order_by(table.c.id)
        )
        return [
            Change(0, "add", sub_id, t, s, p, d, k, criteria_tuple(c), m, *grouped)
            for sub_id, t, s, p, d, k, c, m, *grouped in self.session.execute(query)
        ]

    def members(self) -> list[tuple[int, str, str, Policy]]:
        """(id, tenant, group, policy) of every subscription in a group, in id order: what
        the loader's group index needs beside ``columns()`` (grouped rows are few; the
        (tenant, group) index serves it)."""
        query = (
            sa.select(
                Subscription.id, Subscription.tenant, Subscription.group, Subscription.group_policy
            )
            .where(Subscription.group.is_not(None))
            .order_by(Subscription.id)
        )
        return [
            (int(sub_id), tenant, group, check_policy(policy))
            for sub_id, tenant, group, policy in self.session.execute(query)
            if group is not None  # the policy is set with it (store.groups)
        ]

    def changes_since(self, seq: int, limit: int = 10_000, upto: int | None = None) -> list[Change]:
        """Changes with a sequence number above ``seq`` (and at most ``upto``), oldest
        first. Plain rows fetched at once, not ORM objects nor one driver fetch per row: a
        loader reads a mass removal's 100,000 changes through here, and each of those cost
        about as much as the rest of the read."""
        table = ChangeLog.__table__
        query = sa.select(
            table.c.seq, table.c.op, table.c.subscription_id, *(table.c[n] for n in _CHANGE_COLUMNS)
        ).where(table.c.seq > seq)
        if upto is not None:
            query = query.where(table.c.seq <= upto)
        rows = self.session.execute(query.order_by(table.c.seq).limit(limit)).all()
        return [
            Change(seq_, op, sub_id, t, s, p, d, k, criteria_tuple(c), m, *grouped)
            for seq_, op, sub_id, t, s, p, d, k, c, m, *grouped in rows
        ]

    def group_policies(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Policy]:
        """The stored policy of each (tenant, group) in ``keys`` that has members (every
        member carries it: ``store.groups``). One query per tenant, on the (tenant, group)
        index."""
        by_tenant: dict[str, set[str]] = {}
        for tenant, group in keys:
            by_tenant.setdefault(tenant, set()).add(group)
        found: dict[tuple[str, str], Policy] = {}
        for tenant, groups in by_tenant.items():
            rows = self.session.execute(
                sa.select(Subscription.group, Subscription.group_policy)
                .where(Subscription.tenant == tenant, Subscription.group.in_(sorted(groups)))
                .distinct()
            )
            for name, policy in rows:
                found[(tenant, str(name))] = check_policy(policy)
        return found

    def groups_of(self, ids: Collection[int]) -> dict[int, str | None]:
        """The group of each stored subscription in ``ids``."""
        if not ids:
            return {}
        rows = self.session.execute(
            sa.select(Subscription.id, Subscription.group).where(Subscription.id.in_(sorted(ids)))
        )
        return {int(sub_id): group for sub_id, group in rows}

    def last_seq(self) -> int:
        """The newest change's sequence number (0 when there is none)."""
        seq = self.session.execute(sa.select(sa.func.max(ChangeLog.seq))).scalar()
        return int(seq or 0)

    def change_lag(self, applied: int) -> tuple[int, float]:
        """The newest change's seq and the age in seconds, by the database's clock, of the
        oldest change after ``applied`` (0.0 when there is none). The age counts from the
        change's ``created_at``, its transaction's start: one statement, two index probes."""
        oldest = (
            sa.select(ChangeLog.created_at)
            .where(ChangeLog.seq > applied)
            .order_by(ChangeLog.seq)
            .limit(1)
            .scalar_subquery()
        )
        newest, created_at, now = self.session.execute(
            sa.select(sa.func.max(ChangeLog.seq), oldest, sa.func.now())
        ).one()
        if created_at is None:
            return int(newest or 0), 0.0
        return int(newest or 0), max(0.0, (now - created_at).total_seconds())


def _parse(data: bytes, parse: pa_csv.ParseOptions, names: Sequence[str]) -> pa.Table:
    """Arrow's CSV reader on ``data``, whose lines hold ``names`` (of which it keeps
    ``_COLUMN_NAMES``)."""
    return pa_csv.read_csv(
        pa.py_buffer(data),
        read_options=pa_csv.ReadOptions(column_names=list(names)),
        parse_options=parse,
        convert_options=pa_csv.ConvertOptions(
            column_types=_COLUMNS_SCHEMA,
            include_columns=list(_COLUMN_NAMES),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


def _postgres_chunks(raw: Any) -> list[pa.Table] | None:
    """The startup read of ``columns`` on PostgreSQL: one statement per ``_CHUNK_ROWS``
    rows (keyset on id) answering one value, their lines joined by PostgreSQL, fields
    separated by ``_SEPARATOR`` and one more after the last, no quoting, parsed by Arrow.
    A CSV ``COPY`` sends a protocol message per row, and taking a million of them in
    Python cost more than PostgreSQL's work (psycopg's generator, 1-2 µs a row, holding
    the GIL: 1.7-2.5 s CPU against 0.4-0.6 s here, load average 10), so the read could not
    overlap with anything; here Python waits with the GIL released and parses 16 values.

    Exact or nothing: a value holding a line break or the separator (validation refuses
    both, ``store.records``, but a row written by hand could) makes a line too many or a
    field too many, so anything but ``count`` lines of six fields is refused, and None
    sends the caller to the quoted CSV ``COPY``. (The empty sixth field keeps a value's
    ``\\r`` off the line's ``\\n``: Arrow would read the two as one line break. An empty
    line is a line here, so a value's trailing break is counted too.)"""
    tables: list[pa.Table] = []
    last = -(2**63)
    with raw.cursor(binary=True) as cursor:
        while True:
            cursor.execute(_CHUNK_QUERY, (last, _CHUNK_ROWS), binary=True)
            count, last, data = cursor.fetchone()
            if not count:
                return tables
            try:
                table = _parse(data, _CHUNK_PARSE, _CHUNK_FIELDS)
            except pa.ArrowInvalid:
                return None
            if table.num_rows != count:
                return None
            tables.append(table)
            if count < _CHUNK_ROWS:
                return tables


def _postgres_csv(raw: Any) -> pa.Table:
    """Every row as one quoted CSV ``COPY``, parsed by Arrow: exact for any text, slower
    (a protocol message per row); see ``_postgres_chunks``."""
    query = f"SELECT {', '.join(_COLUMN_NAMES)} FROM subscription ORDER BY id"
    chunks: list[bytes] = []
    with raw.cursor() as cursor, cursor.copy(f"COPY ({query}) TO STDOUT (FORMAT csv)") as copy:
        chunks.extend(bytes(chunk) for chunk in copy)
    return _parse(b"".join(chunks), pa_csv.ParseOptions(), _COLUMN_NAMES)
