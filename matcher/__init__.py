"""In-memory topic matching engines behind one interface (see ``Matcher``).

>>> m = create_matcher("trie")
>>> m.subscribe(1, "stock.*.msft"); m.subscribe(2, "stock.#")
>>> sorted(m.match("stock.nasdaq.msft"))
[1, 2]
"""

from __future__ import annotations

from matcher.base import EMPTY, SUB_ID_LIMIT, BatchIds, Matcher, MatchResult, check_sub_id
from matcher.errors import (
    CapacityError,
    InvalidPatternError,
    InvalidSubscriptionIdError,
    InvalidTopicError,
    MatcherError,
    SubscriptionConflictError,
)
from matcher.grammar import DIALECTS, Dialect, checked_text, get_dialect
from matcher.headers import HeaderLimits, HeadersMatcher, InvalidHeadersError
from matcher.limits import DEFAULT_LIMITS, Limits
from matcher.registry import ENGINES, create_matcher

__all__ = [
    "DEFAULT_LIMITS",
    "DIALECTS",
    "EMPTY",
    "ENGINES",
    "SUB_ID_LIMIT",
    "BatchIds",
    "CapacityError",
    "Dialect",
    "HeaderLimits",
    "HeadersMatcher",
    "InvalidHeadersError",
    "InvalidPatternError",
    "InvalidSubscriptionIdError",
    "InvalidTopicError",
    "Limits",
    "MatchResult",
    "Matcher",
    "MatcherError",
    "SubscriptionConflictError",
    "check_sub_id",
    "checked_text",
    "create_matcher",
    "get_dialect",
]
