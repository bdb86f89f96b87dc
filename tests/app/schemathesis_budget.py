"""Schemathesis hooks for the bounded run of ``tests/app/test_openapi.py``: the described
rules (``tests.app.schemathesis_hooks``), and a cap on how deep generated labels nest.

The document states the labels' depth bound exactly (8 levels, unrolled), and the coverage
phase walks every shape up to it: an array or an object at each level, some 2**8 shapes per
operation that takes labels, about 13,000 requests (80 s) of the run. The bounded run keeps
the shapes of at most ``MAX_DEPTH`` levels, for both kinds of case; the bound itself is
held by ``tests/app/test_api_bad_input.py`` (``labels_too_deep``), and ``st run`` from the
repository (``schemathesis.toml``) walks every shape."""

from __future__ import annotations

from typing import Any, Final

import schemathesis

from tests.app import schemathesis_hooks  # noqa: F401  (registers the described rules)

MAX_DEPTH: Final = 2


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _labels(body: Any) -> list[Any]:
    """The labels of a subscription body, or of each item of a bulk body."""
    if not isinstance(body, dict):
        return []
    items = body.get("items")
    bodies = [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
    return [one["labels"] for one in [body, *bodies] if "labels" in one]


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    # The labels object is one level; its values nest at most MAX_DEPTH more.
    return all(_depth(labels) <= MAX_DEPTH + 1 for labels in _labels(case.body))
