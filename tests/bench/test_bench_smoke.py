"""The benchmark suite runs end to end, its workload follows seed 000's rules exactly, and
its baseline is right (the bar is worthless if it is fast but wrong). No timings asserted."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from bench.baseline import DictTrie
from bench.report import format_table
from bench.subjects import BASELINE
from bench.suite import run
from bench.workloads import random_subscriptions, seed_patterns, throughput_workload
from matcher import ENGINES

TABLES = ("throughput", "micro", "memory")


def _assert_outputs(out: Path) -> None:
    for name in TABLES:
        assert (out / f"{name}.png").stat().st_size > 0
        text = (out / f"{name}.txt").read_text(encoding="utf-8")
        for subject in (*ENGINES, BASELINE):
            assert re.search(rf"^{subject}\s", text, re.MULTILINE), (name, subject)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["tables"]) == set(TABLES)


def test_quick_suite_writes_every_table_for_every_engine(tmp_path: Path) -> None:
    tables = run(tmp_path / "out", list(ENGINES), quick=True)
    assert [table.name for table in tables] == list(TABLES)
    for table in tables:
        assert [row[0] for row in table.rows] == [*ENGINES, BASELINE]
        assert format_table(table) == (tmp_path / "out" / f"{table.name}.txt").read_text(
            encoding="utf-8"
        )
    _assert_outputs(tmp_path / "out")


def test_cli_bench_quick(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "--quick", "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    assert "Throughput" in result.output
    _assert_outputs(tmp_path / "cli")


def test_cli_rejects_unknown_engine() -> None:
    result = CliRunner().invoke(app, ["bench", "--quick", "--engine", "no_such_engine"])
    assert result.exit_code != 0
    assert "no_such_engine" in result.output


def _is_digit_word(word: str) -> bool:
    return len(word) == 1 and word.isdigit()


@pytest.mark.parametrize(
    ("index", "shape"),
    [
        (0, "*dd"),  # i % 10 == 0
        (25, "d*d"),  # i % 25 == 0
        (45, "dd*"),  # i % 45 == 0
        (50, "*dd"),  # 50 % 10 == 0 wins over 50 % 25 == 0
        (75, "d*d"),
        (90, "*dd"),  # 90 % 10 == 0 wins over 90 % 45 == 0
        (225, "d*d"),  # 225 % 25 == 0 wins over 225 % 45 == 0
        (1, "ddd"),
        (999, "ddd"),
    ],
)
def test_throughput_patterns_follow_seed_rules(index: int, shape: str) -> None:
    pattern = throughput_workload(messages=0).patterns[index]
    words = pattern.split(".")
    assert len(words) == 3
    for word, kind in zip(words, shape, strict=True):
        assert word == "*" if kind == "*" else _is_digit_word(word), pattern


def test_throughput_workload_shape_and_reproducibility() -> None:
    workload = throughput_workload(messages=3_000)
    assert len(workload.patterns) == 1_000
    assert len(workload.messages) == 3_000
    assert workload.subscriptions()[7] == (7, workload.patterns[7])
    assert throughput_workload(messages=3_000) == workload
    assert throughput_workload(messages=3_000, seed=1) != workload
    # digits are drawn left to right, patterns first, from one generator
    rng = random.Random(0)
    assert list(workload.patterns) == seed_patterns(1_000, 3, rng)
    assert workload.messages[0] == workload.patterns[0].replace("*", str(rng.randrange(10)))


def test_every_message_concretizes_its_pattern_and_the_baseline_finds_it() -> None:
    workload = throughput_workload(messages=2_500)
    trie = DictTrie()
    for sub_id, pattern in workload.subscriptions():
        trie.subscribe(sub_id, pattern)
    for k, message in enumerate(workload.messages):
        pattern = workload.patterns[k % 1_000]
        for word, token in zip(message.split("."), pattern.split("."), strict=True):
            assert _is_digit_word(word)
            assert token in ("*", word)
        assert k % 1_000 in trie.match(message)


def test_random_subscriptions_are_five_words_with_seed_star_positions() -> None:
    patterns = random_subscriptions(1_000)
    assert len(patterns) == 1_000
    assert patterns[0].split(".")[0] == "*"
    assert patterns[25].split(".")[2] == "*"
    assert patterns[45].split(".")[4] == "*"
    assert all(len(p.split(".")) == 5 for p in patterns)
    assert all("*" not in p for i, p in enumerate(patterns) if i % 10 and i % 25 and i % 45)


# Hand-written AMQP cases (issue 2's table, each confirmed against RabbitMQ there).
BASELINE_CASES = [
    ("#", "", True),
    ("*", "", False),
    ("a.#", "a", True),
    ("#.a.#", "a", True),
    ("a.*.b", "a..b", True),
    ("a.*", "a.", True),
    ("a.#.#.b", "a.b", True),
    ("a", "A", False),
    ("", "", True),
    ("", ".", False),
    ("a.*", "a", False),
    ("*.b", "a.b", True),
    ("#", "a.b.c", True),
    ("a.#.c", "a.b.x.c", True),
    ("a.#.c", "a.b.x.d", False),
    ("*.*", "a", False),
    ("a*", "ab", False),
]


@pytest.mark.parametrize(("pattern", "topic", "expected"), BASELINE_CASES)
def test_baseline_matches_hand_table(pattern: str, topic: str, expected: bool) -> None:
    trie = DictTrie()
    trie.subscribe(1, pattern)
    assert (1 in trie.match(topic)) is expected


def test_baseline_unsubscribe_prunes_and_reports() -> None:
    trie = DictTrie()
    trie.subscribe(1, "a.*.c")
    trie.subscribe(2, "a.#")
    trie.subscribe(3, "a.*.c")
    assert trie.match("a.b.c") == {1, 2, 3}
    assert trie.unsubscribe(1) is True
    assert trie.unsubscribe(1) is False
    assert trie.match("a.b.c") == {2, 3}
    trie.subscribe(2, "x")  # re-subscribing an id replaces its pattern
    assert trie.match("a.b.c") == {3}
    assert len(trie) == 2
    assert trie.unsubscribe(2) and trie.unsubscribe(3)
    assert trie.is_empty()
    assert len(trie) == 0
