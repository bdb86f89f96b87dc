"""The benchmark suite runs end to end (every table, quick sizes), table selection works,
its workloads follow the "Fast Topic Matching" generator exactly, and its baseline is right
(the bar is worthless if it is fast but wrong). No timings asserted."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from bench.adversarial import ROW_LABELS as ADVERSARIAL_LABELS
from bench.adversarial import STATEFUL, TIMEOUT
from bench.api_load import BATCH, FAN_OUTS, HEALTHZ, MATCH, batch_fan_out_label, fan_out_label
from bench.baseline import DictTrie, MemoizedDictTrie
from bench.concurrency import EXCLUDED as CONCURRENCY_EXCLUDED
from bench.cs_trie_load import LOAD_SUBJECTS
from bench.hostile import row_labels as hostile_rows
from bench.loadgen import wrk_path
from bench.report import format_table
from bench.sizes import QUICK
from bench.storm import PHASES as STORM_PHASES
from bench.subjects import BASELINE, MEMOIZED_BASELINE, cached
from bench.suite import run
from bench.tables import TABLES
from bench.tests.test_api_load import assert_measured
from harness.services import require
from harness.workloads import (
    adversarial_workload,
    concurrency_key,
    distinct_first_word_patterns,
    drawn_topics,
    mixed_subscriptions,
    random_subscriptions,
    scaled_workload,
    seed_patterns,
    throughput_workload,
)
from matcher import ENGINES, create_matcher
from matcher.groups import POLICIES

SCALED = scaled_workload()
ENGINE_ROWS = [*ENGINES, BASELINE]
#: Row labels each table must have with every engine selected.
EXPECTED_ROWS: dict[str, list[str]] = {
    "throughput": [*(s for e in ENGINES for s in (e, cached(e))), BASELINE],
    "micro": ENGINE_ROWS,
    "memory": ENGINE_ROWS,
    "scaled": ENGINE_ROWS,
    "concurrency_50_50": [e for e in ENGINE_ROWS if e not in CONCURRENCY_EXCLUDED],
    "concurrency_90_10": [e for e in ENGINE_ROWS if e not in CONCURRENCY_EXCLUDED],
    "concurrency_latency": [e for e in ENGINE_ROWS if e not in CONCURRENCY_EXCLUDED],
    "adversarial": [
        *(f"{e} {state}" if e in STATEFUL else e for e in ENGINES for state in ("cold", "warm")),
        ADVERSARIAL_LABELS[MEMOIZED_BASELINE],
        ADVERSARIAL_LABELS[BASELINE],
    ],
    "cs_trie_load": [e for e in ENGINE_ROWS if e in LOAD_SUBJECTS],
    "api_load": [
        HEALTHZ,
        MATCH,
        *(fan_out_label(n) for n in FAN_OUTS),
        f"{BATCH} ({QUICK.api_batch_topics:,})",
        *(batch_fan_out_label(n, QUICK.api_batch_topics) for n in FAN_OUTS),
    ],
    "batch_fanout": ["1", "2", "14", "131"],
    "group_choice": [
        *(f"{policy}, {n:,} members" for policy in POLICIES for n in QUICK.group_members),
        f"hash, {QUICK.group_served:,} members, HTTP",
    ],
    "slow_clients": [
        f"{probe}, {phase}"
        for phase in ("before", "while hanging")
        for probe in ("/healthz", "/v1/match")
    ],
    # QUICK's 300 slow clients stay under the cap: every one is held to the deadline.
    "slow_clients_cut": ["answered 408 request_timeout"],
    "store_load": [f"{QUICK.store_sizes[0]:,}"],
    "import_load": [
        f"{backend}, {mode}, {QUICK.import_sizes[0]:,}"
        for mode in ("direct", "api")
        for backend in ("PostgreSQL", "DuckDB")
    ],
    "startup": ["postgresql", "duckdb"],
    "propagation": ["subscribe A -> B"],
    "mass_removal": [
        f"one {name}, {window}"
        for name in ("subscriber", "label")
        for window in ("2 s before", "during the removal")
    ],
    "write_load": ["postgresql", "duckdb"],
    "hostile": hostile_rows(QUICK.hostile_patterns, QUICK.hostile_topics),
    "storm": [
        f"{backend}, {phase}" for backend in ("postgresql", "duckdb") for phase in STORM_PHASES
    ],
}
#: tests/pipeline runs the pipeline table on its own shared Spark session; route_scale has its
#: own test (bench/tests/test_bench_route_scale.py: it starts Spark processes of its own).
SUITE_TABLES = [name for name in TABLES if name not in ("pipeline", "route_scale")]


def _dedupe(labels: list[str]) -> list[str]:
    return list(dict.fromkeys(labels))


def _assert_outputs(out: Path, names: list[str]) -> None:
    for name in names:
        assert (out / f"{name}.png").stat().st_size > 0
        text = (out / f"{name}.txt").read_text(encoding="utf-8")
        for label in _dedupe(EXPECTED_ROWS[name]):
            assert re.search(rf"^{re.escape(label)}\s", text, re.MULTILINE), (name, label)
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results["tables"]) == set(names)


def test_registry_names_every_table() -> None:
    assert list(TABLES) == [
        "throughput",
        "micro",
        "memory",
        "scaled",
        "concurrency",
        "adversarial",
        "cs_trie_load",
        "api_load",
        "batch_fanout",
        "group_choice",
        "slow_clients",
        "store_load",
        "import_load",
        "startup",
        "propagation",
        "mass_removal",
        "write_load",
        "hostile",
        "storm",
        "pipeline",
        "route_scale",
    ]


def test_every_table_has_a_one_line_description() -> None:
    for name, table in TABLES.items():
        assert table.description.strip(), name
        assert "\n" not in table.description, name
        assert len(f"  {name:<14}{table.description}") <= 100, name


def _outputs(name: str) -> list[str]:
    """The tables registry entry ``name`` writes (``concurrency`` writes three)."""
    return [t for t in EXPECTED_ROWS if t == name or t.startswith(f"{name}_")]


def test_every_suite_table_has_expected_rows() -> None:
    assert [t for name in SUITE_TABLES for t in _outputs(name)] == list(EXPECTED_ROWS)


# One test per table, so that the two xdist workers share the tables that start servers.
@pytest.mark.slow
@pytest.mark.parametrize("name", SUITE_TABLES)
def test_quick_table_writes_its_outputs_for_every_engine(name: str, tmp_path: Path) -> None:
    if name == "api_load":
        # `make setup` installs wrk where it can (root): on CI a missing wrk is a failure.
        require(wrk_path() is not None, "wrk", hint="apt-get install wrk")
    tables = run(tmp_path / "out", list(ENGINES), quick=True, tables=[name])
    assert [table.name for table in tables] == _outputs(name)
    for table in tables:
        labels = _dedupe([str(row[0]) for row in table.rows])  # startup: 2 rows per store
        assert labels == _dedupe(EXPECTED_ROWS[table.name]), table.name
        assert all(len(row) == len(table.columns) for row in table.rows), table.name
        assert format_table(table) == (tmp_path / "out" / f"{table.name}.txt").read_text(
            encoding="utf-8"
        )
    _assert_outputs(tmp_path / "out", _outputs(name))
    by_name = {table.name: table for table in tables}
    if name == "adversarial":
        # both dict tries run under a CPU budget: a figure or "timeout", never a hang
        for row in by_name["adversarial"].rows[-2:]:
            assert row[0] in ADVERSARIAL_LABELS.values()
            assert row[3] == TIMEOUT or isinstance(row[3], float)
    if name == "api_load":
        assert_measured(by_name["api_load"], "wrk", QUICK.api_batch_topics)
    if name == "memory":
        # the largest RSS size is measured for the large subjects only
        memory = {row[0]: row for row in by_name["memory"].rows}
        assert memory["trie"][-1] is not None
        assert memory["naive"][-1] is None


def test_cli_bench_quick_table_subset(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    args = ["bench", "scaled", "cs_trie_load", "--quick", "--engine", "trie", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--engine", "cs_trie"])
    assert result.exit_code == 0, result.output
    assert "Scaled" in result.output
    assert "Throughput" not in result.output
    assert sorted(path.name for path in out.glob("*.txt")) == ["cs_trie_load.txt", "scaled.txt"]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["tables"] == ["scaled", "cs_trie_load"]
    for name in ("scaled", "cs_trie_load"):
        rows = [row["subject"] for row in results["tables"][name]["rows"]]
        assert rows == ["trie", "cs_trie", BASELINE]


def test_cli_rejects_unknown_engine() -> None:
    result = CliRunner().invoke(app, ["bench", "--quick", "--engine", "no_such_engine"])
    assert result.exit_code != 0
    assert "no_such_engine" in result.output


def test_cli_rejects_unknown_table() -> None:
    result = CliRunner().invoke(app, ["bench", "no_such_table", "--quick"])
    assert result.exit_code != 0
    assert "no_such_table" in result.output


def test_run_rejects_unknown_table() -> None:
    with pytest.raises(ValueError, match="no_such_table"):
        run(None, ["trie"], quick=True, tables=["no_such_table"])


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
def test_throughput_patterns_put_the_star_by_index(index: int, shape: str) -> None:
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


def test_mixed_subscriptions_have_the_startup_shape_and_drawn_topics_match() -> None:
    pairs = mixed_subscriptions(7_000, seed=3)
    assert pairs == mixed_subscriptions(7_000, seed=3)
    patterns = [p for _, p in pairs]
    assert {len(p.split(".")) for p in patterns} == {3, 4, 5, 6}
    assert sum("*" in p for p in patterns) == 1_000  # 1 in 7
    assert sum(p.endswith(".#") for p in patterns) == 120  # 1 in 50, less those with a *
    assert len({s for s, _ in pairs}) > 6_000  # spread over 50,000 subscribers
    naive = create_matcher("naive")
    for i, pattern in enumerate(patterns[:500]):
        naive.subscribe(i, pattern)
    for topic in drawn_topics(patterns[:500], 200, seed=3):
        assert naive.match(topic), topic


def test_random_subscriptions_are_five_words_with_seed_star_positions() -> None:
    patterns = random_subscriptions(1_000)
    assert len(patterns) == 1_000
    assert patterns[0].split(".")[0] == "*"
    assert patterns[25].split(".")[2] == "*"
    assert patterns[45].split(".")[4] == "*"
    assert all(len(p.split(".")) == 5 for p in patterns)
    assert all("*" not in p for i, p in enumerate(patterns) if i % 10 and i % 25 and i % 45)


@pytest.mark.parametrize(
    ("index", "star"),
    [
        (0, 0),  # i % 10 == 0
        (25, 2),  # i % 25 == 0
        (45, 4),  # i % 45 == 0
        (50, 0),  # 50 % 10 == 0 wins over 50 % 25 == 0
        (90, 0),  # 90 % 10 == 0 wins over 90 % 45 == 0
        (225, 2),  # 225 % 25 == 0 wins over 225 % 45 == 0
        (1, None),
        (99_999, None),
    ],
)
def test_scaled_patterns_put_the_star_by_index(index: int, star: int | None) -> None:
    words = SCALED.patterns[index].split(".")
    assert len(words) == 5
    for position, word in enumerate(words):
        assert word == "*" if position == star else _is_digit_word(word), words


def test_scaled_workload_shape_and_messages() -> None:
    assert len(SCALED.patterns) == 100_000
    assert len(SCALED.messages) == 100_000
    assert scaled_workload(1_000, 10) == scaled_workload(1_000, 10)
    # message k concretizes pattern k: its '*' filled with a digit, every other word kept
    for k in (0, 25, 45, 50, 12_345, 99_999):
        for word, token in zip(
            SCALED.messages[k].split("."), SCALED.patterns[k].split("."), strict=True
        ):
            assert _is_digit_word(word)
            assert token in ("*", word)


def test_adversarial_workload_shape() -> None:
    workload = adversarial_workload(1_000, 200)
    assert len(workload.patterns) == 1_000
    assert len(workload.messages) == 200
    hashes = [pattern.split(".").count("#") for pattern in workload.patterns]
    assert max(hashes) == 4  # up to 4, and 4 does occur
    assert min(hashes) == 0
    alphabet = {"a", "b", "c"}
    for pattern in workload.patterns:
        assert set(pattern.split(".")) <= alphabet | {"*", "#"}, pattern
    for topic in workload.messages:
        words = topic.split(".")
        assert len(words) == 128
        assert set(words) <= alphabet
        assert len(topic.encode()) == 255  # the longest AMQP routing key
    assert adversarial_workload(1_000, 200) == workload


def test_concurrency_and_load_keys() -> None:
    assert concurrency_key(0) == "0.0.0"
    assert concurrency_key(123) == "3.23.123"
    patterns = distinct_first_word_patterns(1_000)
    assert len({p.split(".")[0] for p in patterns}) == 1_000
    assert patterns[7] == "w7.x.y"


# Hand-written AMQP cases from the matching rules (empty words, `#` anywhere, case), each as
# RabbitMQ routes it.
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


@pytest.mark.parametrize("trie_type", [DictTrie, MemoizedDictTrie])
@pytest.mark.parametrize(("pattern", "topic", "expected"), BASELINE_CASES)
def test_baseline_matches_hand_table(
    trie_type: type[DictTrie], pattern: str, topic: str, expected: bool
) -> None:
    trie = trie_type()
    trie.subscribe(1, pattern)
    assert (1 in trie.match(topic)) is expected


def test_memoized_baseline_agrees_with_naive_on_adversarial_topics() -> None:
    workload = adversarial_workload(60, 4, seed=5)
    trie, naive = MemoizedDictTrie(), create_matcher("naive")
    for sub_id, pattern in workload.subscriptions():
        trie.subscribe(sub_id, pattern)
        naive.subscribe(sub_id, pattern)
    results = [trie.match(topic) for topic in workload.messages]
    assert results == [set(naive.match(topic)) for topic in workload.messages]
    assert any(results), "no topic matched anything: the comparison would be vacuous"


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
