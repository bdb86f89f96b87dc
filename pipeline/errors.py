"""Exceptions of the pipeline package: problems with a whole input (a missing column, an
unreadable path), never with a single row; malformed rows go to ``rejects/`` instead."""

from __future__ import annotations


class PipelineError(Exception):
    """Base class: ``code`` names the rule for machines, the message explains it to people."""

    code: str = "pipeline_error"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InputSchemaError(PipelineError):
    """An input table lacks a required column or has one of an unusable type."""


class UnknownQueryError(PipelineError):
    """An analytics query name that does not exist, or one that needs an input not given."""
