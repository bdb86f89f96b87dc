"""DuckDB's many-row statements bind a few values, not one per field: DuckDB's client
inspects every Python value it binds, and in a serving process (pandas kept out,
``app.heap``) each inspection is two failed imports of pandas, paid with the GIL held."""

from __future__ import annotations

from pathlib import Path

from harness.fresh import fresh_interpreter

#: Run in a fresh interpreter (pandas not imported yet): the imports of pandas DuckDB tries
#: while 100 subscription rows are inserted and 1,000 ids' statistics are added, then the
#: rows and counts stored.
_COUNTED = """
import datetime, importlib.abc, sys
from app import heap
heap.keep_pandas_out()
from migrations.runner import upgrade
from sqlalchemy.orm import Session
from store import Database
from store.duckdb_write import insert_rows
from store.models import Subscription
from store.stats import add_counts

url = sys.argv[1]
upgrade(url)
db = Database(url)
tried = []

class Count(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pandas":
            tried.append(name)
        return None

sys.meta_path.insert(0, Count())
now = datetime.datetime.now(datetime.timezone.utc)
rows = [
    dict(id=i, tenant="t", subscriber=f"s{i}", pattern="a.*", dialect="amqp", kind="topic",
         criteria=None, mode=None, labels={"n": i}, created_at=now, group=None,
         group_policy=None, expires_at=now)
    for i in range(1, 101)
]
with db.engine.begin() as connection:
    insert_rows(connection, Subscription.__table__, rows)
print(len(tried))
tried.clear()
ids = [i for i in range(1, 101) for _ in range(10)]
with Session(db.engine) as session:
    add_counts(session, ids, [1] * len(ids), [1_700_000_000] * len(ids), postgres=False)
    session.commit()
print(len(tried))
with db.engine.connect() as connection:
    stored = connection.exec_driver_sql(
        "SELECT count(*), count(labels), count(expires_at) FROM subscription"
    ).one()
    counted = connection.exec_driver_sql(
        "SELECT count(*), sum(matches) FROM subscription_stats"
    ).one()
print(tuple(stored), tuple(counted))
"""


def test_many_rows_bind_a_few_values(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    inserted, added, stored = fresh_interpreter(_COUNTED, url, cwd=tmp_path)
    # A value bound is two tries; a value per field would be 2,600 and 6,000.
    assert int(inserted) <= 4
    assert int(added) <= 12
    assert stored == "(100, 100, 100) (100, 1000)"
