"""Analytics over the routing job's delivery tables (DuckDB, read in memory: the service's
own database file is never opened). Operator only: the tables hold every tenant's data."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

import orjson
from fastapi import APIRouter, Query, Response
from fastapi import Path as PathParam

from app.dependencies import AdminCaller, ServicesDep
from app.errors import documented
from app.refusals import NotConfiguredError, NotFoundError, OperatorOnlyError, ServiceError
from pipeline.analytics import BUCKETS, QUERIES, run_query
from pipeline.errors import (
    MissingDeliveriesError,
    MissingSubscriptionsError,
    PipelineError,
    UnknownVersionError,
)
from topicstore.models import AnalyticsOut

router = APIRouter(prefix="/v1", tags=["analytics"])

if TYPE_CHECKING:  # a Literal built at run time is a plain str to the type checker
    Bucket: TypeAlias = str
else:
    Bucket = Literal[BUCKETS]


def _no_output(root: Path, export: Path | None) -> str:
    """What to run to fill ``root``, with absolute paths (a command run elsewhere still
    writes where the service reads): the console shows it as the page's empty state."""
    root = root.resolve()
    route = f"topicstore route --messages MESSAGES --out {root}"
    if export is None:
        return f"no route output in {root} yet: run `{route}`"
    export = export.resolve()
    return (
        f"no route output in {root} yet: run `topicstore export {export}`, then "
        f"`{route} --subscriptions {export}`"
    )


@router.get(
    "/analytics/{query}",
    response_model=AnalyticsOut,
    responses=documented(400, 401, 403, 404, 422, 429),
)
def analytics(
    # The registry's names as the schema's enum; the route keeps the parameter a string so
    # that another name gets the envelope's own code (400 ``unknown_query``).
    query: Annotated[
        str, PathParam(description="The query to run.", json_schema_extra={"enum": [*QUERIES]})
    ],
    caller: AdminCaller,
    services: ServicesDep,
    limit: Annotated[int | None, Query(ge=1, le=10_000, description="Rows of a ranking.")] = None,
    bucket: Annotated[Bucket, Query(description="timeline's time bucket.")] = "hour",
    as_of: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**63 - 1,
            description="The routed table's version to read (default: the newest).",
        ),
    ] = None,
) -> Response:
    """Deliveries per subscriber or tenant, fan-out, hot topics, the unmatched rate over
    time, subscriptions that never matched (``TOPICSTORE_ANALYTICS_DIR``: a routed table,
    ``data/routed`` by default; 404 ``no_deliveries`` says what to run while it holds none),
    over the table's newest committed version or ``as_of`` an earlier one."""
    if caller.tenant is not None:
        raise OperatorOnlyError("analytics span every tenant: use the admin token")
    root = services.settings.analytics_dir
    if root is None:
        raise NotConfiguredError("set TOPICSTORE_ANALYTICS_DIR", code="analytics_not_configured")
    if query not in QUERIES:
        raise ServiceError(
            f"unknown query {query!r}; known: {', '.join(QUERIES)}", code="unknown_query"
        )
    export = services.settings.analytics_subscriptions
    # An export not written yet: never-matched says what to run, the other queries run.
    subscriptions = export if export is not None and export.is_file() else None
    try:
        result = run_query(
            query, root, subscriptions=subscriptions, limit=limit, bucket=bucket, as_of=as_of
        )
    except MissingDeliveriesError as e:
        raise NotFoundError(_no_output(root, export), code=e.code) from e
    except MissingSubscriptionsError as e:
        message = e.message
        if export is not None:
            message += f": write it with `topicstore export {export.resolve()}`"
        raise NotFoundError(message, code=e.code) from e
    except UnknownVersionError as e:
        raise NotFoundError(e.message, code=e.code) from e
    except PipelineError as e:
        raise ServiceError(e.message, code=e.code) from e
    body = {"query": query, "columns": list(result.columns), "rows": result.records()}
    return Response(orjson.dumps(body), media_type="application/json")
