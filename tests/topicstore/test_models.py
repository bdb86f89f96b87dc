"""The API's models name what the engines, the store and the analytics name: the models
stay importable without them (``topicstore.models`` imports pydantic only), so the names
are written there once more and held equal here."""

from __future__ import annotations

from typing import get_args

from matcher import DIALECTS
from pipeline.analytics import BUCKETS
from store import expiry as store_expiry
from store.models import AUDIT_ACTIONS
from store.records import HEADERS_DIALECT, MODES
from topicstore.models import (
    MAX_TTL_SECONDS,
    AnalyticsBucket,
    AuditAction,
    Dialect,
    Mode,
    StoredDialect,
)


def test_the_models_name_the_dialects_modes_and_buckets_of_the_service() -> None:
    assert get_args(Dialect) == tuple(DIALECTS)
    assert get_args(StoredDialect) == (*DIALECTS, HEADERS_DIALECT)
    assert get_args(Mode) == MODES
    assert get_args(AnalyticsBucket) == BUCKETS


def test_the_models_bound_expiries_as_the_store_does() -> None:
    assert MAX_TTL_SECONDS == store_expiry.MAX_TTL_SECONDS
    assert get_args(AuditAction) == AUDIT_ACTIONS
