"""Every size the suite uses, in one place: ``FULL`` for measurements, ``QUICK`` for the
smoke test, which runs the very same code, only smaller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from harness.workloads import DEFAULT_SEED


@dataclass(frozen=True, slots=True)
class Sizes:
    """Sizes, repeat counts and time budgets of every table (grouped by table)."""

    # throughput
    patterns: int
    messages: int
    repeats: int
    naive_messages: int
    # micro
    micro_hot: int
    micro_batch: int
    micro_topics: int
    micro_rounds: int
    # memory: tracemalloc sizes, child-RSS sizes, per-measurement time budgets
    memory_sizes: tuple[int, ...]
    memory_rss_sizes: tuple[int, ...]
    memory_budget_s: float
    memory_large_budget_s: float
    # scaled: a subject whose first pass extrapolates past the budget (after probing for
    # scaled_probe_s) is timed on the messages it got through
    scaled_patterns: int
    scaled_messages: int
    scaled_repeats: int
    scaled_budget_s: float
    scaled_probe_s: float
    # concurrency (ops/s) and its read-latency table
    concurrency_threads: tuple[int, ...]
    concurrency_ops: int
    concurrency_repeats: int
    concurrency_prefill: int
    latency_keys: int
    latency_readers: int
    latency_writers: int
    latency_reads: int
    latency_max_writes: int
    latency_rounds: int
    # adversarial
    adversarial_patterns: int
    adversarial_topics: int
    adversarial_repeats: int
    adversarial_naive_topics: int
    adversarial_baseline_topics: int
    adversarial_call_budget_s: float
    # cs_trie_load
    load_sizes: tuple[int, ...]
    snapshot_calls: int
    # api_load: the service over HTTP (seconds per endpoint and round)
    api_subscriptions: int
    api_seconds: float
    api_batch_topics: int
    api_rounds: int
    # group_choice: members of the one group a batch goes into, in process and served
    group_members: tuple[int, ...]
    group_served: int
    # slow_clients: connections that never finish a request, and the request deadline
    slow_clients: int
    slow_timeout_s: float
    # store_load, propagation: PostgreSQL (skipped with a note when it is not reachable)
    store_sizes: tuple[int, ...]
    import_sizes: tuple[int, ...]
    # startup: a real service on a store already holding this many subscriptions, idle
    # seconds after ready before its steady memory is read, seconds of matches per row
    startup_subscriptions: int
    startup_settle_s: float
    startup_match_s: float
    propagation_changes: int
    # mass_removal: two real replicas on PostgreSQL; one subscriber holds the second figure
    removal_subscriptions: int
    removal_held: int
    # write_load: stored subscriptions before the churn (PostgreSQL and DuckDB), and its
    # seconds
    write_sizes: tuple[int, ...]
    write_seconds: float
    # hostile: patterns per subscriber, members of the hash group, topics of the batch into
    # it, repeats of each request, seconds of single matches idle and flooded
    hostile_patterns: int
    hostile_members: int
    hostile_topics: int
    hostile_repeats: int
    hostile_probe_s: float
    # storm: stored subscriptions (PostgreSQL and DuckDB), re-creates of them per storm,
    # and the seconds the match prober runs alone first
    storm_sizes: tuple[int, ...]
    storm_recreates: int
    storm_quiet_s: float
    # pipeline: Spark local[2] end to end, and the naive cross join on a sample
    pipeline_messages: int
    pipeline_subscriptions: int
    pipeline_naive_sample: int
    # route_scale: messages routed by the batch route and by the stream (landing as files of
    # route_scale_file_messages), and seconds of the latency phase (a file a second)
    route_scale_messages: int
    route_scale_file_messages: int
    route_scale_latency_s: int
    seed: int = DEFAULT_SEED


FULL: Final = Sizes(
    patterns=1_000,
    messages=100_000,
    repeats=3,
    naive_messages=2_000,
    micro_hot=1_000,
    micro_batch=100,
    micro_topics=100,
    micro_rounds=5,
    memory_sizes=(1_000, 100_000),
    memory_rss_sizes=(100_000, 1_000_000),
    memory_budget_s=30.0,
    memory_large_budget_s=240.0,
    scaled_patterns=100_000,
    scaled_messages=100_000,
    scaled_repeats=3,
    scaled_budget_s=30.0,
    scaled_probe_s=1.0,
    concurrency_threads=(1, 2, 4, 8, 12, 16),
    concurrency_ops=1_000,
    concurrency_repeats=3,
    concurrency_prefill=1_000,
    latency_keys=1_000,
    latency_readers=2,
    latency_writers=2,
    latency_reads=100_000,
    latency_max_writes=10_000_000,
    latency_rounds=3,
    adversarial_patterns=1_000,
    adversarial_topics=200,
    adversarial_repeats=3,
    adversarial_naive_topics=20,
    adversarial_baseline_topics=3,
    adversarial_call_budget_s=2.0,
    load_sizes=(10_000, 100_000),
    snapshot_calls=100_000,
    store_sizes=(1_000_000,),
    import_sizes=(1_000_000,),
    startup_subscriptions=1_000_000,
    startup_settle_s=3.0,
    startup_match_s=10.0,
    propagation_changes=200,
    removal_subscriptions=300_000,
    removal_held=100_000,
    write_sizes=(10_000, 1_000_000),
    write_seconds=60.0,
    hostile_patterns=10_000,
    hostile_members=20_000,
    hostile_topics=1_000,
    hostile_repeats=3,
    hostile_probe_s=2.0,
    storm_sizes=(1_000_000,),
    storm_recreates=50_000,
    storm_quiet_s=5.0,
    pipeline_messages=1_000_000,
    pipeline_subscriptions=10_000,
    pipeline_naive_sample=5_000,
    route_scale_messages=10_000_000,
    route_scale_file_messages=100_000,
    route_scale_latency_s=60,
    api_subscriptions=100_000,
    api_seconds=5.0,
    api_batch_topics=1_000,
    api_rounds=3,
    group_members=(100, 20_000, 100_000),
    group_served=20_000,
    slow_clients=20_000,
    slow_timeout_s=10.0,
)
QUICK: Final = Sizes(
    patterns=1_000,
    messages=2_000,
    repeats=1,
    naive_messages=200,
    micro_hot=100,
    micro_batch=10,
    micro_topics=10,
    micro_rounds=1,
    memory_sizes=(100, 1_000),
    memory_rss_sizes=(1_000, 5_000),
    memory_budget_s=5.0,
    memory_large_budget_s=5.0,
    scaled_patterns=2_000,
    scaled_messages=2_000,
    scaled_repeats=1,
    scaled_budget_s=0.5,
    scaled_probe_s=0.05,
    concurrency_threads=(1, 2, 4),
    concurrency_ops=100,
    concurrency_repeats=1,
    concurrency_prefill=100,
    latency_keys=100,
    latency_readers=2,
    latency_writers=2,
    latency_reads=500,
    latency_max_writes=100_000,
    latency_rounds=1,
    adversarial_patterns=100,
    adversarial_topics=10,
    adversarial_repeats=1,
    adversarial_naive_topics=3,
    adversarial_baseline_topics=1,
    adversarial_call_budget_s=0.2,
    load_sizes=(1_000, 5_000),
    snapshot_calls=1_000,
    store_sizes=(2_000,),
    import_sizes=(2_000,),
    startup_subscriptions=5_000,
    # settle + match past RECONCILE_EVERY_S: a reconciliation still runs during a row
    startup_settle_s=0.5,
    startup_match_s=1.5,
    propagation_changes=10,
    removal_subscriptions=20_000,
    removal_held=5_000,
    write_sizes=(2_000,),
    write_seconds=2.0,
    hostile_patterns=200,
    hostile_members=200,
    hostile_topics=50,
    hostile_repeats=1,
    hostile_probe_s=0.3,
    storm_sizes=(2_000,),
    storm_recreates=400,
    storm_quiet_s=1.0,
    pipeline_messages=2_000,
    pipeline_subscriptions=100,
    pipeline_naive_sample=100,
    route_scale_messages=20_000,
    route_scale_file_messages=10_000,
    route_scale_latency_s=3,
    api_subscriptions=1_000,
    api_seconds=1.0,
    api_batch_topics=100,
    api_rounds=1,
    group_members=(100, 2_000),
    group_served=500,
    slow_clients=300,
    slow_timeout_s=2.0,
)
