"""The shadow check: a sample of matches answered by every engine and compared."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loader import RoutingTable
from loader.shadow import ShadowCheck
from store import Change

ENGINES = ("trie", "optimized_inverted_bitmap")


def _add(seq: int, sub_id: int, pattern: str) -> Change:
    return Change(seq, "add", sub_id, "default", f"s{sub_id}", pattern, "amqp", "topic", None, None)


def _table(every: int) -> tuple[RoutingTable, ShadowCheck]:
    shadow = ShadowCheck(every)
    table = RoutingTable(ENGINES, shadow=shadow)
    table.apply([_add(1, 1, "a.*"), _add(2, 2, "a.#"), _add(3, 3, "b.c")])
    return table, shadow


def test_agreeing_engines_are_checked_on_the_sample() -> None:
    table, shadow = _table(every=3)
    for _ in range(9):
        assert sorted(table.match("default", "amqp", "a.x")) == [1, 2]
    assert (shadow.checks, shadow.disagreements) == (3, 0)


def test_a_disagreement_is_counted_and_the_answer_is_the_first_engine() -> None:
    table, shadow = _table(every=1)
    # Break the second engine behind the table's back: the check must notice.
    table._topic[("default", "amqp")]["optimized_inverted_bitmap"].unsubscribe(2)
    assert sorted(table.match("default", "amqp", "a.x")) == [1, 2]
    assert sorted(table.match("default", "amqp", "b.c")) == [3]
    assert (shadow.checks, shadow.disagreements) == (2, 1)


def test_a_sample_taken_during_a_write_is_discarded() -> None:
    table, shadow = _table(every=1)
    table._topic[("default", "amqp")]["optimized_inverted_bitmap"].unsubscribe(2)
    with table._apply_lock:  # a write in progress: engines may differ legitimately
        table.match("default", "amqp", "a.x")
    assert (shadow.checks, shadow.disagreements) == (0, 0)


def test_a_batch_answered_by_native_is_sampled_topic_by_topic() -> None:
    """``match_ids`` on ``native`` answers in C and still checks one topic in ``every``
    against the other engine; a disagreement is counted, a racing write is not."""
    shadow = ShadowCheck(2)
    table = RoutingTable(("native", "trie"), shadow=shadow)
    table.apply([_add(1, 1, "a.*"), _add(2, 2, "a.#"), _add(3, 3, "b.c")])
    topics = ["a.x", "b.c", "a", "b.c", "é.\x00", "a.x"]
    counts, ids, errors = table.match_ids("default", "amqp", topics)
    assert (list(counts), list(ids)) == ([2, 1, 1, 1, 0, 2], [1, 2, 3, 2, 3, 1, 2])
    assert {k: e.code for k, e in errors.items()} == {4: "nul_byte"}
    assert (shadow.seen, shadow.checks, shadow.disagreements) == (6, 3, 0)
    table._topic[("default", "amqp")]["trie"].unsubscribe(2)
    table.match_ids("default", "amqp", ["b.c", "a.x"])
    assert (shadow.checks, shadow.disagreements) == (4, 1)
    with table._apply_lock:
        table.match_ids("default", "amqp", ["b.c", "a.x"])
    assert (shadow.checks, shadow.disagreements) == (4, 1)


def test_off_and_single_engine_tables_never_check() -> None:
    table, shadow = _table(every=0)
    table.match("default", "amqp", "a.x")
    assert shadow.checks == 0
    single = RoutingTable(("trie",), shadow=ShadowCheck(1))
    assert single.shadow is None


@given(every=st.integers(0, 7), before=st.integers(0, 30), n=st.integers(0, 30))
def test_due_among_picks_what_due_would_pick_one_by_one(every: int, before: int, n: int) -> None:
    """A batch's sample (``due_among``) is the matches ``due`` would have picked, and the
    count moves on alike."""
    one_by_one, batched = ShadowCheck(every), ShadowCheck(every)
    for _ in range(before):
        one_by_one.due()
        batched.due()
    picked = [k for k in range(n) if one_by_one.due()]
    assert list(batched.due_among(n)) == picked
    assert batched.seen == one_by_one.seen
