"""The table registry: name -> a one-line description and the function that measures it.
``topicstore bench NAME`` selects by these names and lists them in its help; adding a table
is one function and one entry.

A runner gets the engines to measure and the sizes, and yields one or more ``Table``s as
soon as each is measured; the baseline is added where it makes sense.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from bench.adversarial import run_adversarial
from bench.api_load import run_api_load
from bench.batch_fanout import run_batch_fanout
from bench.concurrency import run_concurrency
from bench.cs_trie_load import run_cs_trie_load
from bench.group_choice import run_group_choice
from bench.hostile import run_hostile
from bench.import_load import run_import_load
from bench.latency import run_read_latency
from bench.mass_removal import run_mass_removal
from bench.memory import run_memory
from bench.micro import MicroInputs, run_micro
from bench.propagation import run_propagation
from bench.report import Table
from bench.scaled import run_scaled
from bench.sizes import Sizes
from bench.slow_clients import run_slow_clients
from bench.startup import run_startup
from bench.store_load import run_store_load
from bench.storm import run_storm
from bench.subjects import BASELINE, MEMOIZED_BASELINE, cached
from bench.throughput import run_throughput
from bench.write_load import run_write_load
from harness.workloads import (
    adversarial_workload,
    random_subscriptions,
    scaled_workload,
    throughput_workload,
    topics_for,
)

TableRunner: TypeAlias = Callable[[Sequence[str], Sizes], Iterator[Table]]


def _throughput(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    subjects = [subject for engine in engines for subject in (engine, cached(engine))]
    workload = throughput_workload(sizes.patterns, sizes.messages, sizes.seed)
    yield run_throughput(
        [*subjects, BASELINE], workload, sizes.repeats, subsets={"naive": sizes.naive_messages}
    )


def _micro(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    hot = random_subscriptions(sizes.micro_hot, sizes.seed)
    inputs = MicroInputs(
        hot=hot,
        batch=random_subscriptions(sizes.micro_batch, sizes.seed + 1),
        topics=topics_for(hot[: sizes.micro_topics], sizes.seed),
        rounds=sizes.micro_rounds,
    )
    yield run_micro([*engines, BASELINE], inputs)


def _memory(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    yield run_memory(
        [*engines, BASELINE],
        sizes.memory_sizes,
        sizes.memory_rss_sizes,
        sizes.memory_budget_s,
        sizes.memory_large_budget_s,
        seed=sizes.seed,
    )


def _scaled(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    workload = scaled_workload(sizes.scaled_patterns, sizes.scaled_messages, sizes.seed)
    yield run_scaled(
        [*engines, BASELINE],
        workload,
        sizes.scaled_repeats,
        sizes.scaled_budget_s,
        sizes.scaled_probe_s,
    )


def _concurrency(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    prefill = random_subscriptions(sizes.concurrency_prefill, sizes.seed)
    subjects = [*engines, BASELINE]
    yield from run_concurrency(
        subjects,
        prefill,
        sizes.concurrency_threads,
        sizes.concurrency_ops,
        sizes.concurrency_repeats,
    )
    yield run_read_latency(
        subjects,
        prefill,
        sizes.latency_keys,
        sizes.latency_readers,
        sizes.latency_writers,
        sizes.latency_reads,
        sizes.latency_max_writes,
        sizes.latency_rounds,
    )


def _adversarial(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    workload = adversarial_workload(
        sizes.adversarial_patterns, sizes.adversarial_topics, seed=sizes.seed
    )
    yield run_adversarial(
        [*engines, MEMOIZED_BASELINE, BASELINE],
        workload,
        sizes.adversarial_repeats,
        subsets={
            "naive": sizes.adversarial_naive_topics,
            MEMOIZED_BASELINE: sizes.adversarial_baseline_topics,
            BASELINE: sizes.adversarial_baseline_topics,
        },
        budget_s=sizes.adversarial_call_budget_s,
    )


def _cs_trie_load(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    yield run_cs_trie_load([*engines, BASELINE], sizes.load_sizes, sizes.snapshot_calls)


def _api_load(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    # The service as configured by default: its engines are a setting, not --engine.
    del engines
    yield run_api_load(
        sizes.api_subscriptions,
        sizes.api_seconds,
        sizes.api_batch_topics,
        rounds=sizes.api_rounds,
        seed=sizes.seed,
    )


def _batch_fanout(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's answering engine
    yield run_batch_fanout(sizes.api_subscriptions, sizes.api_rounds + 2, sizes.seed)


def _group_choice(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's answering engine
    yield run_group_choice(sizes.group_members, sizes.group_served, sizes.api_rounds + 2)


def _slow_clients(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines
    yield from run_slow_clients(sizes.slow_clients, sizes.slow_timeout_s)


def _store_load(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines: what a replica builds at startup
    yield run_store_load(sizes.store_sizes, sizes.seed)


def _import_load(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the store's write path: no engine involved
    yield run_import_load(sizes.import_sizes, sizes.seed)


def _startup(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's defaults, as an operator starts it
    yield run_startup(
        sizes.startup_subscriptions,
        sizes.seed,
        settle_s=sizes.startup_settle_s,
        match_s=sizes.startup_match_s,
    )


def _propagation(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines
    yield run_propagation(sizes.propagation_changes)


def _mass_removal(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines
    yield run_mass_removal(sizes.removal_subscriptions, sizes.removal_held, sizes.seed)


def _write_load(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines
    yield run_write_load(sizes.write_sizes, sizes.seed, seconds=sizes.write_seconds)


def _hostile(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines
    yield run_hostile(
        sizes.hostile_patterns,
        sizes.hostile_members,
        sizes.hostile_topics,
        sizes.hostile_repeats,
        sizes.hostile_probe_s,
    )


def _storm(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the service's default engines
    yield run_storm(
        sizes.storm_sizes, sizes.storm_recreates, sizes.seed, quiet_s=sizes.storm_quiet_s
    )


def _pipeline(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the job's engines are compared inside the table
    from bench.pipeline import run_pipeline_bench  # Spark loads only for this table

    yield run_pipeline_bench(
        sizes.pipeline_messages, sizes.pipeline_subscriptions, sizes.pipeline_naive_sample
    )


def _route_scale(engines: Sequence[str], sizes: Sizes) -> Iterator[Table]:
    del engines  # the job's default engine, as `topicstore route` runs it
    from bench.route_scale import run_route_scale  # Spark loads only for this table

    yield run_route_scale(
        sizes.route_scale_messages, sizes.route_scale_file_messages, sizes.route_scale_latency_s
    )


@dataclass(frozen=True, slots=True)
class BenchTable:
    """What a table measures (one line, for ``--help``) and the function that measures it."""

    description: str
    run: TableRunner


#: Every table, in the order ``topicstore bench`` runs them by default.
TABLES: Final[dict[str, BenchTable]] = {
    "throughput": BenchTable(
        "msg/s matching the 'Fast Topic Matching' 3-word patterns, with and without the cache",
        _throughput,
    ),
    "micro": BenchTable(
        "ns per subscribe, unsubscribe and match, empty and with 1,000 subscriptions", _micro
    ),
    "memory": BenchTable("bytes per subscription, traced and resident, up to 1,000,000", _memory),
    "scaled": BenchTable("ns per match at 100,000 five-word patterns", _scaled),
    "concurrency": BenchTable(
        "ops/s of 1 to 16 threads at two read/write mixes, and read latency under writes",
        _concurrency,
    ),
    "adversarial": BenchTable(
        "µs per match of #-heavy patterns against 128-word topics (worst cases)", _adversarial
    ),
    "cs_trie_load": BenchTable(
        "seconds to load patterns with distinct first words, and snapshot() cost", _cs_trie_load
    ),
    "api_load": BenchTable(
        "the HTTP API under load: /healthz, /v1/match, /v1/match/batch (a real server)",
        _api_load,
    ),
    "batch_fanout": BenchTable(
        "topics/s of the batch answer (match, names, JSON) at 1-131 matches per topic",
        _batch_fanout,
    ),
    "group_choice": BenchTable(
        "ms per 1,000-topic batch into one group of 100 to 100,000 members, per policy",
        _group_choice,
    ),
    "slow_clients": BenchTable(
        "/healthz and /v1/match while 20,000 connections hang mid-request (a real server)",
        _slow_clients,
    ),
    "store_load": BenchTable(
        "PostgreSQL bulk insert, then the startup build of the routing table", _store_load
    ),
    "import_load": BenchTable(
        "topicstore sub import of one CSV: embedded DuckDB against PostgreSQL", _import_load
    ),
    "startup": BenchTable(
        "a service on 1M stored subscriptions: seconds to ready, RSS, p99 while reconciling",
        _startup,
    ),
    "propagation": BenchTable(
        "ms from a commit on one replica to a match on another (LISTEN/NOTIFY)", _propagation
    ),
    "mass_removal": BenchTable(
        "100,000 subscriptions removed in one request: response, matches, /readyz",
        _mass_removal,
    ),
    "write_load": BenchTable(
        "durable API writes: 8 clients creating and deleting; match p99 and replica lag",
        _write_load,
    ),
    "hostile": BenchTable(
        "a tenant's costly explains, overlap searches, batches, floods: answer within 1 s?",
        _hostile,
    ),
    "storm": BenchTable(
        "a reconnect storm: 50,000 re-creates of stored subscriptions, single and bulk",
        _storm,
    ),
    "pipeline": BenchTable(
        "msg/s of the Spark routing job against a naive cross join + rlike", _pipeline
    ),
    "route_scale": BenchTable(
        "route and route --follow, 10M messages at 1.9 deliveries: msg/s, latency, files",
        _route_scale,
    ),
}
