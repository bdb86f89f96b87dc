"""The CSV reader's block path (Arrow splits blocks of plain lines) reads every file as
the csv module reads it whole: the same records, items and problems on the same lines,
whatever the blocks' edges cut through."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import imports
from app.imports import Item, Problem, read_batches

#: Lines mixing the common record with every other shape the csv module reads.
LINE = st.one_of(
    st.sampled_from(["q1,a.b", "q2,a.*.c", "q3,#", "q,", ",p", "subscriber,pattern", ""]),
    st.sampled_from(["q,p,amqp", "q,p,mqtt,t", "q,p,,t,g,random", "a,b,c,d,e,f,g", "solo"]),
    st.sampled_from(['"q,1",p', '"open', "q,\r", "q,p\r", "x,\xe9", "q,a\x00b", "  ,p"]),
    st.text(alphabet=st.sampled_from('ab,.*#" \xe9'), max_size=8),
)
ENDS = st.sampled_from(["\n", "\r\n"])


def _whole(data: bytes) -> tuple[list[tuple[int, Item]], list[Problem]]:
    """What the csv module reads from the whole file (the reference)."""
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
    text = io.TextIOWrapper(
        io.BytesIO(data), encoding="utf-8-sig", errors="surrogateescape", newline=""
    )
    for number, item, problem in imports._csv(text):
        if problem is not None:
            problems.append(problem)
        else:
            assert item is not None
            items.append((number, item))
    return items, problems


def _read(path: Path, size: int) -> tuple[list[tuple[int, Item]], list[Problem]]:
    items: list[tuple[int, Item]] = []
    problems: list[Problem] = []
    for batch in read_batches(path, size):
        assert batch.items.size == len(batch.lines) <= size
        items += batch.records()
        problems += batch.problems
    return items, problems


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(LINE, max_size=40),
    end=ENDS,
    last=st.booleans(),
    bom=st.booleans(),
    block=st.sampled_from([8, 16, 64, 1 << 20]),
    size=st.sampled_from([1, 3, 10_000]),
    bad_byte=st.booleans(),
)
def test_blocks_read_as_the_csv_module_reads_the_whole_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lines: list[str],
    end: str,
    last: bool,
    bom: bool,
    block: int,
    size: int,
    bad_byte: bool,
) -> None:
    data = end.join(lines).encode() + (end.encode() if last else b"")
    if bom:
        data = b"\xef\xbb\xbf" + data
    if bad_byte and lines:
        data += b"q,\xff.x\n"
    path = tmp_path / "subscriptions.csv"
    path.write_bytes(data)
    monkeypatch.setattr(imports, "_BLOCK", block)
    assert _read(path, size) == _whole(data)


def test_the_common_rows_stay_columns(tmp_path: Path) -> None:
    path = tmp_path / "subscriptions.csv"
    path.write_bytes(b"subscriber,pattern\r\nq1,a.b\r\nq2,c.*\r\nq3,d,mqtt\r\n\r\nq4,#\r\n")
    (batch,) = read_batches(path)
    assert batch.lines == [2, 3, 4, 6]
    assert batch.items.at.to_pylist() == [0, 1, 3]  # line 4 has a dialect: a record
    assert batch.items.subscriber.to_pylist() == ["q1", "q2", "q4"]
    assert batch.items.others == [(2, {"subscriber": "q3", "pattern": "d", "dialect": "mqtt"})]
