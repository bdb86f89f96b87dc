"""Match API: the hot path. Single matches run on the event loop (microseconds of CPU,
never blocking); a batch runs off it, in slices, so that it never stalls other requests
(see ``match_batch``). Answers are serialized with orjson straight to bytes; the declared
models document the shape."""

from __future__ import annotations

from typing import Annotated, Any, Final

import orjson
from fastapi import APIRouter, Query, Response
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool

from app.auth import Caller
from app.delivery import batch, delivery
from app.dependencies import BatchCaller, MatchCaller, ServicesDep
from app.errors import documented
from app.ratelimit import BATCH_TOPICS
from app.refusals import BatchAnswerTooLargeError, BatchTooLargeError, InvalidRequestError
from app.services import Services
from app.table_reads import MAX_NAMED, explain_topic
from store.records import MAX_NAME_BYTES
from topicstore.models import (
    BatchIn,
    BatchOut,
    Dialect,
    ExplainOut,
    HeadersMatchIn,
    MatchIn,
    MatchOut,
)

#: Topics matched per slice of a batch. A slice runs in a worker thread and costs a few ms
#: (1,000 topics at 1-20 µs each); between slices, and at every GIL switch within one, the
#: event loop serves other requests, so a 10,000-topic batch no longer stalls /healthz and
#: other tenants' matches for its whole duration (it did for 3.8 s). Concurrent batches'
#: slices interleave in the thread pool's order.
BATCH_SLICE: Final = 1_000

router = APIRouter(prefix="/v1", tags=["match"], responses=documented(400, 401, 403, 422, 429, 503))


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")


@router.post("/match", response_model=MatchOut, responses=documented(413))
async def match(body: MatchIn, caller: MatchCaller, services: ServicesDep) -> Response:
    """Every subscription of the caller's tenant whose pattern matches ``topic``, except
    that a group (shared subscription) delivers to one of its matching members, chosen by
    the group's policy (``key``: the ``hash`` policy's key, by default the topic)."""
    return match_answer(services, caller, body)


def match_answer(services: Services, caller: Caller, body: MatchIn) -> Response:
    """``POST /v1/match`` once the caller is authenticated and charged and the body is
    valid: the one implementation behind the route above and ``app.fastpath``, which
    serves the same request without FastAPI's routing and dependency solving."""
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    ids = table.match(tenant, body.dialect, body.topic)
    return _json(delivery(table, tenant, ids, body.topic if body.key is None else body.key))


@router.get("/match", response_model=MatchOut)
async def match_query(
    caller: MatchCaller,
    services: ServicesDep,
    topic: Annotated[str, Query(description="The topic (routing key); may be empty.")],
    dialect: Dialect = "amqp",
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
    key: Annotated[
        str | None, Query(description="The 'hash' policy's key (at most 1,024 UTF-8 bytes).")
    ] = None,
) -> Response:
    """``POST /v1/match`` for quick use from a browser or curl."""
    table = services.table()
    tenant = caller.tenant_for(tenant)
    ids = table.match(tenant, dialect, topic)
    return _json(delivery(table, tenant, ids, topic if key is None else key))


@router.get("/match/explain", response_model=ExplainOut)
def explain_match(
    caller: MatchCaller,
    services: ServicesDep,
    topic: Annotated[str, Query(description="The topic (routing key); may be empty.")],
    dialect: Dialect = "amqp",
    tenant: Annotated[str | None, Query(max_length=MAX_NAME_BYTES)] = None,
    subscriber: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_NAME_BYTES)]],
        Query(
            max_length=MAX_NAMED,
            description="A subscriber to explain when it does not match (repeatable, "
            f"at most {MAX_NAMED}).",
        ),
    ] = [],  # noqa: B006 (FastAPI copies defaults per request)
) -> ExplainOut:
    """Why the topic reaches whom: every matched subscription with the topic words each
    wildcard took (at most 1,000, lowest ids first; ``matched_total`` counts all), and for
    each named subscriber that did not match, its closest pattern (the one that gets furthest
    into the topic) and the first word where it failed. A plain ``def``: explaining is
    O(tokens x words) per pattern, off the event loop."""
    return explain_topic(services.table(), caller.tenant_for(tenant), dialect, topic, subscriber)


@router.post("/match/batch", response_model=BatchOut, responses=documented(413))
async def match_batch(body: BatchIn, caller: BatchCaller, services: ServicesDep) -> Response:
    """Match many topics at once; an invalid topic gets an error entry, the others their
    matches (nothing is dropped). Each topic counts against the tenant's batch-topic rate.
    At most ``max_batch`` topics (10,000) and ``max_batch_matches`` matches in the answer
    (1,000,000): past either, 413. Runs off the event loop in slices of ``BATCH_SLICE``
    topics, so other requests are served meanwhile; each slice waits for a place in
    ``services.fair``, granted to the waiting tenants in turns."""
    return await batch_answer(services, caller, body)


async def batch_answer(services: Services, caller: Caller, body: BatchIn) -> Response:
    """``POST /v1/match/batch`` once the caller is authenticated and the body is valid:
    the one implementation behind the route above and ``app.fastpath``."""
    max_batch = services.settings.max_batch
    if len(body.topics) > max_batch:
        raise BatchTooLargeError(f"a batch holds at most {max_batch} topics")
    keys = body.keys
    if keys is not None and len(keys) != len(body.topics):
        raise InvalidRequestError(
            f"keys holds {len(keys)} keys for {len(body.topics)} topics: one per topic",
            code="keys_mismatch",
        )
    services.limiter.charge(BATCH_TOPICS, caller.tenant, len(body.topics))
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    topics = body.topics
    most = services.settings.max_batch_matches
    parts: list[bytes] = []
    matched = 0
    fair = services.fair
    for start in range(0, len(topics), BATCH_SLICE):
        end = start + BATCH_SLICE
        async with fair.slot(tenant):
            # Matching and encoding in one worker-thread hop: each hop is a GIL hand-off
            # with the event loop, and under concurrent batches a second hop (encoding
            # apart) cost a quarter of the rate.
            part, count = await run_in_threadpool(
                batch,
                table,
                tenant,
                body.dialect,
                topics[start:end],
                None if keys is None else keys[start:end],
            )
        matched += count
        if matched > most:
            raise BatchAnswerTooLargeError(
                f"the answer would hold more than {most:,} matches "
                f"(max_batch_matches); send fewer topics per batch"
            )
        parts.append(part)
    return Response(b'{"results":[' + b",".join(parts) + b"]}", media_type="application/json")


@router.post("/match/headers", response_model=MatchOut, responses=documented(413))
async def match_headers(
    body: HeadersMatchIn, caller: MatchCaller, services: ServicesDep
) -> Response:
    """Content-based routing: subscriptions of kind ``headers`` satisfied by ``headers``."""
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    ids = table.match_headers(tenant, body.headers)
    key = body.key
    if key is None and table.groups.has_groups(tenant):
        key = orjson.dumps(body.headers, option=orjson.OPT_SORT_KEYS).decode()
    return _json(delivery(table, tenant, ids, key or ""))
