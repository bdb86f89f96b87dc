"""Generators of small routing inputs whose expected results come from the naive matcher
(the Spark session is the ``spark`` fixture of the root conftest.py)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from harness.workloads import dense_pattern, dense_topic
from matcher import Matcher, MatcherError, create_matcher

# assertDataFrameEqual imports pandas-on-Spark, which warns unless this is set first.
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


@dataclass(frozen=True)
class Generated:
    """Subscriptions (id, tenant, subscriber, pattern) and messages (id, tenant, topic)."""

    subscriptions: list[tuple[int, str, str, str]]
    messages: list[tuple[str, str, str]]

    def subscriptions_table(self) -> pa.Table:
        ids, tenants, subscribers, patterns = zip(*self.subscriptions, strict=True)
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "tenant": list(tenants),
                "subscriber": list(subscribers),
                "pattern": list(patterns),
            }
        )


def generate(
    subscriptions: int, messages: int, seed: int, tenants: Sequence[str] = ("default",)
) -> Generated:
    rng = random.Random(seed)
    subs = [
        (1000 + i, rng.choice(tenants), f"sub-{i % 7}", dense_pattern(rng))
        for i in range(subscriptions)
    ]
    msgs = [(f"m{k:05d}", rng.choice(tenants), dense_topic(rng)) for k in range(messages)]
    return Generated(subs, msgs)


def naive_deliveries(data: Generated, dialect: str = "amqp") -> set[tuple[str, int, str, str]]:
    """(message_id, subscription_id, subscriber, tenant) by the naive matcher, one engine per
    tenant (tenants never see each other's subscriptions)."""
    engines: dict[str, Matcher] = {}
    for sub_id, tenant, _, pattern in data.subscriptions:
        engines.setdefault(tenant, create_matcher("naive", dialect)).subscribe(sub_id, pattern)
    subscriber = {sub_id: name for sub_id, _, name, _ in data.subscriptions}
    out: set[tuple[str, int, str, str]] = set()
    for message_id, tenant, topic in data.messages:
        naive = engines.get(tenant)
        if naive is None:
            continue
        try:
            found = naive.match(topic)
        except MatcherError:
            continue
        out.update((message_id, i, subscriber[i], tenant) for i in found)
    return out
