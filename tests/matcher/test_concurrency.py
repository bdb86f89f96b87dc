"""Threads subscribing, unsubscribing and matching at once, on every engine.

Afterwards the state equals the sequential model; during the run no reader sees a
half-applied subscription, and every writer reads its own completed writes. The switch
interval is shortened so the GIL changes hands often, mid-operation.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from threading import Event

import pytest

from matcher import ENGINES, HeadersMatcher, Matcher, create_matcher
from matcher._native import NativeMatcher
from matcher.cs_trie import CsTrieMatcher
from matcher.grammar import AMQP, pattern_matches

THREAD_ENGINES = [name for name in ENGINES if name != "naive"]
# Each writer owns the ids [base, base + IDS_PER_WRITER).
IDS_PER_WRITER = 40
OPS = 600
#: How long writers go on past their operations while a reader has had no round during them.
MAX_EXTRA_WRITES_S = 30.0

# Patterns share most words with the near-miss topics below: a half-indexed subscription
# (some positions or nodes in place, others not) would show up as a wrong match.
PATTERNS = ["a.b.c", "a.*.c", "a.#.c", "#.c", "a.b.#", "*.b.*", "a.#.b.#.c", "#"]
NEAR_MISSES = {"a.b.x": {"a.b.#", "*.b.*", "#"}, "x.b.c": {"#.c", "*.b.*", "#"}, "a.c.b": {"#"}}
HITS = ["a.b.c", "a.x.c", "a.b.b.c"]


@pytest.fixture(autouse=True)
def _busy_gil() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class _Phase:
    """The write phase of one ``_run``. Writers draw their operations from ``ops``, which
    goes on past ``count`` while some reader has had no round during the writes (at most
    ``MAX_EXTRA_WRITES_S``): on a loaded machine one reader can be kept off the native
    guard by two batch readers for a whole short phase (CI saw ``[12, 2, 0]``)."""

    def __init__(self) -> None:
        self.overlapped: list[int] = []  # per reader, set by _run

    def ops(self, count: int) -> Iterator[int]:
        yield from range(count)
        deadline = time.monotonic() + MAX_EXTRA_WRITES_S
        extra = count
        while not all(self.overlapped) and time.monotonic() < deadline:
            yield extra
            extra += 1


def _run(
    phase: _Phase, writers: list[Callable[[], None]], readers: list[Callable[[], None]]
) -> list[int]:
    """Run each reader's one-round callable over and over until every writer is done;
    re-raise the first failure of any thread.

    A reader round counts as *overlapping* when it started after the first writer had begun
    and ended before the last writer finished; every reader must have at least one, or the
    test would pass without having read anything while the writes ran. Returns the
    overlapping rounds per reader.

    Writers start only once every reader has finished a round: on a loaded machine a reader
    thread may otherwise not have been scheduled yet when a short write phase ends (seen on
    CI as ``[0, 869]``), and go on writing until every reader has overlapped (``_Phase``).
    """
    errors: list[BaseException] = []
    writing = Event()  # the first writer has started
    stop = Event()  # every writer has finished (or a thread failed)
    overlapped = phase.overlapped = [0] * len(readers)
    looping = [Event() for _ in readers]  # reader i has finished a round

    def guarded(target: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except BaseException as e:  # reported by the main thread
                errors.append(e)
                stop.set()

        return threading.Thread(target=run)

    def write(writer: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            for ready in looping:
                while not ready.wait(0.05):
                    if stop.is_set():
                        return  # a reader failed; the main thread reports it
            writing.set()
            writer()

        return run

    def read(index: int) -> Callable[[], None]:
        def run() -> None:
            while not stop.is_set():
                during = writing.is_set()
                readers[index]()
                looping[index].set()
                if during and not stop.is_set():
                    overlapped[index] += 1

        return run

    reader_threads = [guarded(read(i)) for i in range(len(readers))]
    writer_threads = [guarded(write(w)) for w in writers]
    for t in (*reader_threads, *writer_threads):
        t.start()
    for t in writer_threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a writer did not finish in time"
    stop.set()
    for t in reader_threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a reader did not stop"
    if errors:
        raise errors[0]
    assert all(overlapped), f"reader rounds overlapping the writes: {overlapped}"
    return overlapped


def _pattern_for(sub_id: int) -> str:
    """Each id always gets the same pattern, so a reader can check any id it sees."""
    return PATTERNS[sub_id % len(PATTERNS)]


@pytest.mark.parametrize("engine", [*THREAD_ENGINES, "trie+cache", "native+cache", "dfa+cache"])
def test_concurrent_writers_and_readers(engine: str) -> None:
    name, _, cached = engine.partition("+")
    m = create_matcher(name, cache_size=64 if cached else 0)
    phase = _Phase()
    finals: list[dict[int, str]] = []

    def writer(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            base = seed * IDS_PER_WRITER
            mine: dict[int, str] = {}
            for _ in phase.ops(OPS):
                sub_id = base + rng.randrange(IDS_PER_WRITER)
                if sub_id in mine:
                    assert m.unsubscribe(sub_id)
                    del mine[sub_id]
                    # read-your-writes: a completed unsubscribe is never matched again
                    for topic in HITS:
                        assert sub_id not in m.match(topic)
                else:
                    pattern = _pattern_for(sub_id)
                    m.subscribe(sub_id, pattern)
                    mine[sub_id] = pattern
                    for topic in HITS:
                        expected = pattern_matches(
                            AMQP.parse_pattern(pattern), AMQP.split_topic(topic)
                        )
                        assert (sub_id in m.match(topic)) is expected, (pattern, topic)
            finals.append(mine)

        return run

    def reader() -> None:
        for topic, allowed in NEAR_MISSES.items():
            for sub_id in m.match(topic):
                assert _pattern_for(sub_id) in allowed, (topic, sub_id)

    _run(phase, [writer(seed) for seed in range(3)], [reader, reader])
    model = {k: v for final in finals for k, v in final.items()}
    assert dict(m.subscriptions()) == model
    m._check()
    for topic in [*HITS, *NEAR_MISSES, "", "c", "a.b.c.d"]:
        words = AMQP.split_topic(topic)
        expected = {i for i, p in model.items() if pattern_matches(AMQP.parse_pattern(p), words)}
        assert set(m.match(topic)) == expected, topic


def test_native_batches_walk_without_the_gil_beside_writers_and_single_matches() -> None:
    """``match_ids`` walks slices of its topics holding the guard but not the GIL: writers
    and single matches run meanwhile on other threads. A batch reader sees no
    half-applied write (only allowed patterns on the near misses, every id of a topic
    sorted and distinct), and a writer still reads its own writes."""
    m = NativeMatcher()
    phase = _Phase()
    topics = [*NEAR_MISSES] * 200  # several slices per call

    def writer(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            base = seed * IDS_PER_WRITER
            mine: set[int] = set()
            for _ in phase.ops(OPS):
                sub_id = base + rng.randrange(IDS_PER_WRITER)
                if sub_id in mine:
                    assert m.unsubscribe(sub_id)
                    mine.discard(sub_id)
                    _, ids, _ = m.match_ids(HITS)
                    assert sub_id not in ids
                else:
                    m.subscribe(sub_id, _pattern_for(sub_id))
                    mine.add(sub_id)
                    if _pattern_for(sub_id) == "#":
                        _, ids, _ = m.match_ids(HITS)
                        assert list(ids).count(sub_id) == len(HITS)

        return run

    def batch_reader() -> None:
        counts, ids, errors = m.match_ids(topics)
        assert not errors and len(counts) == len(topics) and sum(counts) == len(ids)
        at = 0
        for topic, count in zip(topics, counts, strict=True):
            mine = list(ids[at : at + count])
            at += count
            assert mine == sorted(set(mine)), topic
            for sub_id in mine:
                assert _pattern_for(sub_id) in NEAR_MISSES[topic], (topic, sub_id)

    def single_reader() -> None:
        for topic, allowed in NEAR_MISSES.items():
            for sub_id in m.match(topic):
                assert _pattern_for(sub_id) in allowed, (topic, sub_id)

    _run(phase, [writer(seed) for seed in range(3)], [batch_reader, batch_reader, single_reader])
    m._check()


def test_cs_trie_snapshots_are_consistent_while_writers_run() -> None:
    m = CsTrieMatcher()
    phase = _Phase()

    def writer() -> None:
        rng = random.Random(1)
        for _ in phase.ops(OPS * 2):
            sub_id = rng.randrange(60)
            if not m.unsubscribe(sub_id):
                m.subscribe(sub_id, rng.choice(PATTERNS))

    def reader() -> None:
        snap = m.snapshot()
        listing = dict(snap)
        assert len(snap) == len(listing)
        for topic in HITS:
            words = AMQP.split_topic(topic)
            expected = {
                i for i, p in listing.items() if pattern_matches(AMQP.parse_pattern(p), words)
            }
            # The snapshot's matches and its listing are one and the same version.
            assert set(snap.match(topic)) == expected

    _run(phase, [writer], [reader, reader])


def test_headers_concurrent() -> None:
    m = HeadersMatcher()
    phase = _Phase()

    def writer(seed: int) -> Callable[[], None]:
        def run() -> None:
            rng = random.Random(seed)
            for _ in phase.ops(OPS * 4):  # cheap operations: a long enough write phase
                sub_id = seed * 100 + rng.randrange(20)
                if not m.unsubscribe(sub_id):
                    m.subscribe(sub_id, {"a": "1", "b": "2", "c": None}, "all")
                    assert sub_id in m.match({"a": "1", "b": "2", "c": "x"})

        return run

    def reader() -> None:
        # two of the three criteria: an "all" subscription must never match
        assert not set(m.match({"a": "1", "b": "2"}))
        assert not set(m.match({"a": "1", "c": "x"}))

    _run(phase, [writer(1), writer(2)], [reader, reader])
    m._check()


def test_every_engine_runs_here() -> None:
    # Guards the parametrization above against an engine silently dropping out.
    assert set(THREAD_ENGINES) == set(ENGINES) - {"naive"}
    assert all(isinstance(create_matcher(n), Matcher) for n in ENGINES)
