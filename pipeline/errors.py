"""Exceptions of the pipeline package: problems with a whole input (a missing column, an
unreadable path) or with a request (an unknown query), never with a single row; malformed
rows become reject rows of the routed table instead.

Each kind of refusal has its own class with a fixed ``code``, so a caller (the API, the
command line) decides by class, and the code strings stay what clients already see.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base class: ``code`` names the rule for machines, the message explains it to people."""

    code: str = "pipeline_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _FixedCodeError(PipelineError):
    """A kind of refusal with its own fixed ``code``: raised with the message alone."""

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)


class InputSchemaError(PipelineError):
    """An input table lacks a required column or has one of an unusable type."""


class MissingColumnError(_FixedCodeError, InputSchemaError):
    """An input table lacks a column the query or job needs."""

    code = "missing_column"


class UnknownQueryError(_FixedCodeError):
    """An analytics query name that does not exist."""

    code = "unknown_query"


class MissingDeliveriesError(_FixedCodeError):
    """The path given as the job's output holds no routed table (no ``_delta_log/``)."""

    code = "no_deliveries"


class MissingSubscriptionsError(_FixedCodeError):
    """A query that needs a subscriptions export was run without one."""

    code = "needs_subscriptions"


class InvalidBucketError(_FixedCodeError):
    """A time bucket ``timeline`` does not know."""

    code = "invalid_bucket"


class UnknownVersionError(_FixedCodeError):
    """``as_of`` names a version the routed table does not have (or no longer has)."""

    code = "unknown_version"


class NoChartError(_FixedCodeError):
    """A chart asked for a query that has none."""

    code = "no_chart"
