"""How the command line reports a known error: one line ``error: <code>: <message>`` on
stderr (and a ``hint:`` line where one helps) and a documented exit status, never a
traceback. An exception not named here is a bug and keeps its traceback.

Exit statuses (docs/cli.md lists them too):

* 1: refused or invalid input (a rule, a refusal of the service, a bad import line);
* 2: usage or configuration (click's usage errors, a setting, a store never migrated);
* 3: the store or the service is unavailable (DuckDB file held, connection refused).

The error types are imported only when an error is being reported, and only from modules
the command loaded (one not imported cannot have raised), so neither a command that
succeeds nor one refused at its options loads the store, SQLAlchemy or httpx for this: a
usage error is reported in the time typer takes to start.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Final

import typer
from typer.core import TyperGroup

REFUSED: Final = 1
USAGE: Final = 2
UNAVAILABLE: Final = 3

_TOKEN_HINT: Final = (
    "the service takes TOPICSTORE_ADMIN_TOKEN (in development mode, the token in "
    "data/dev-admin-token)"
)


class UsageError(Exception):
    """A command's option holds a value the command cannot use (exit status 2)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Report:
    code: str
    message: str
    status: int
    hint: str | None = None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _settings_message(error: Any) -> str:
    """A pydantic-settings ``ValidationError`` as ``TOPICSTORE_NAME: problem; ...``."""
    return "; ".join(
        f"TOPICSTORE_{'_'.join(map(str, problem['loc'])).upper()}: {problem['msg']}"
        for problem in error.errors()
    )


def report_for(error: BaseException) -> Report | None:
    """The report of a known error, or None for one that is not (a bug)."""
    if isinstance(error, UsageError):
        return Report(error.code, error.message, USAGE)
    if "pydantic" in sys.modules:
        from pydantic import ValidationError

        if isinstance(error, ValidationError) and error.title == "Settings":
            return Report("invalid_setting", _settings_message(error), USAGE)
    if "app.auth" in sys.modules:
        from app.auth import ConfigurationError

        if isinstance(error, ConfigurationError):
            return Report(error.code, str(error), USAGE)
    if "topicstore.client" in sys.modules:  # the HTTP mode's client: a running service
        from topicstore.client import ApiError

        if isinstance(error, ApiError):
            hint = _TOKEN_HINT if error.status == 401 else None
            status = UNAVAILABLE if error.status == 503 else REFUSED
            return Report(error.code, error.message, status, hint)
    if "app.refusals" in sys.modules:
        from app.refusals import ServiceError

        if isinstance(error, ServiceError):
            return Report(error.code, error.message, REFUSED)
    if "matcher.errors" in sys.modules:
        from matcher.errors import MatcherError

        if isinstance(error, MatcherError):
            return Report(error.code, error.message, REFUSED)
    return _io_report(error)


def _io_report(error: BaseException) -> Report | None:
    """Errors of the store, the database driver and the HTTP client (loaded only if the
    command loaded them: a module not imported cannot have raised)."""
    if "store.errors" in sys.modules:
        from store import (
            DatabaseLockedError,
            NoSchemaError,
            StoreError,
            UnsupportedDatabaseError,
        )

        if isinstance(error, DatabaseLockedError):
            hint = "stop that process, or run the command while its service runs (or --api URL)"
            return Report(error.code, error.message, UNAVAILABLE, hint)
        if isinstance(error, NoSchemaError) and error.code == "no_schema":
            from app.cli.connect import NO_SCHEMA_HINT, store_origin
            from app.settings import get_settings

            message = f"{error.message} ({store_origin(get_settings())})"
            return Report(error.code, message, USAGE, NO_SCHEMA_HINT)
        if isinstance(error, NoSchemaError | UnsupportedDatabaseError):
            return Report(error.code, error.message, USAGE)
        if isinstance(error, StoreError):
            return Report(error.code, error.message, REFUSED)
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.exc import OperationalError

        if isinstance(error, OperationalError):
            message = _first_line(str(error.orig))
            return Report("store_unavailable", message, UNAVAILABLE)
    if "httpx" in sys.modules:
        import httpx

        if isinstance(error, httpx.TransportError):
            url = error.request.url if _has_request(error) else "the service"
            message = f"cannot reach {url}: {_first_line(str(error)) or type(error).__name__}"
            return Report("service_unavailable", message, UNAVAILABLE)
    return None


def _has_request(error: Any) -> bool:
    try:
        error.request  # noqa: B018 (httpx raises RuntimeError when there is none)
    except RuntimeError:
        return False
    return True


def emit(report: Report) -> None:
    typer.echo(f"error: {report.code}: {report.message}", err=True)
    if report.hint:
        typer.echo(f"hint: {report.hint}", err=True)


class ReportingGroup(TyperGroup):
    """The root command group: every command runs inside ``invoke``, so a known error
    raised by any of them is reported here, once, and ends with its exit status."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as e:  # the entry point: report the known ones, re-raise the rest
            report = report_for(e)
            if report is None:
                raise  # typer's own exits and usage errors, and bugs
            emit(report)
            raise typer.Exit(report.status) from e
