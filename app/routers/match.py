"""Match API: the hot path. Single matches run on the event loop (microseconds of CPU,
never blocking) unless their answer is large (``LARGE_MATCH``); large answers, explains and
batches run off it in fair places (``app.fairness``), a batch in slices, so that none
stalls other requests or other tenants. Explains and batches have a budget and stop when
their client leaves (``app.work``). Answers are serialized with orjson straight to bytes;
the declared models document the shape."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any, Final

import orjson
from fastapi import APIRouter, Query, Request, Response
from pydantic import StringConstraints
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive

from app.auth import Caller
from app.delivery import batch, check_keys, delivery, hash_key
from app.dependencies import BatchCaller, MatchCaller, ServicesDep
from app.errors import documented
from app.ratelimit import BATCH_TOPICS, MATCH
from app.refusals import BatchAnswerTooLargeError, BatchTooLargeError, InvalidRequestError
from app.services import Services
from app.table_reads import MAX_NAMED, explain_topic
from app.work import STEPS_PER_MATCH
from loader import RoutingTable
from matcher import MatchResult
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
#: A single match of at least this many ids has its answer (sorting, names, a group's
#: choice, JSON: a few hundred µs and up) built in a worker thread in the fair place for
#: work holding the GIL (``app.fairness``), and billed to the tenant's match rate as its ids
#: (``STEPS_PER_MATCH`` ids = one match): a tenant matching into a big group, or against
#: thousands of its own patterns, then waits its turn instead of stalling the event loop.
LARGE_MATCH: Final = 1_000

router = APIRouter(prefix="/v1", tags=["match"], responses=documented(400, 401, 403, 422, 429, 503))


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")


@router.post("/match", response_model=MatchOut, responses=documented(413))
async def match(body: MatchIn, caller: MatchCaller, services: ServicesDep) -> Response:
    """Every subscription of the caller's tenant whose pattern matches ``topic``, except
    that a group (shared subscription) delivers to one of its matching members, chosen by
    the group's policy (``key``: the ``hash`` policy's key, by default the topic)."""
    answer = match_answer(services, caller, body)
    return answer if isinstance(answer, Response) else await answer


def match_answer(
    services: Services, caller: Caller, body: MatchIn
) -> Response | Awaitable[Response]:
    """``POST /v1/match`` once the caller is authenticated and charged and the body is
    valid: the one implementation behind the route above and ``app.fastpath``, which
    serves the same request without FastAPI's routing and dependency solving. The answer
    itself, or (``LARGE_MATCH`` ids and more) what builds it off the event loop."""
    return _answer(services, caller, body.tenant, body.dialect, body.topic, body.key)


def _answer(
    services: Services,
    caller: Caller,
    tenant: str | None,
    dialect: str,
    topic: str,
    key: str | None,
) -> Response | Awaitable[Response]:
    key = hash_key(key, topic)
    table = services.table()
    tenant = caller.tenant_for(tenant)
    tracing = services.tracing
    if tracing is None:
        ids = table.routes(tenant, dialect, topic)
    else:
        ids = tracing.routes(table, tenant, dialect, topic)
    if len(ids) < LARGE_MATCH:
        return _json(delivery(table, tenant, ids, key))
    return _large_answer(services, caller, table, tenant, ids, key)


async def _large_answer(
    services: Services,
    caller: Caller,
    table: RoutingTable,
    tenant: str,
    ids: MatchResult,
    key: str,
) -> Response:
    """A match of ``LARGE_MATCH`` ids or more, answered in a worker thread in the fair
    place for work holding the GIL and billed to the caller's match rate by its ids."""
    services.limiter.debit(MATCH, caller.tenant, len(ids) / STEPS_PER_MATCH)
    async with services.fair_python.slot(tenant):
        content = await run_in_threadpool(lambda: orjson.dumps(delivery(table, tenant, ids, key)))
    return Response(content, media_type="application/json")


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
    answer = _answer(services, caller, tenant, dialect, topic, key)
    return answer if isinstance(answer, Response) else await answer


@router.get("/match/explain", response_model=ExplainOut)
async def explain_match(
    request: Request,
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
    into the topic) and the first word where it failed. Explaining is O(tokens x words)
    per pattern: it runs off the event loop in the fair place for work holding the GIL, within
    ``TOPICSTORE_EXPLAIN_BUDGET`` steps (422 ``explain_budget_exceeded`` past it: name
    fewer subscribers or explain a shorter topic), and its steps are billed to the match
    rate (1,000 steps as one match)."""
    table = services.table()
    target = caller.tenant_for(tenant)
    return await services.work.run(
        request.receive,
        "explain_budget",
        target,
        lambda budget: explain_topic(table, target, dialect, topic, subscriber, budget),
        bill=(MATCH, caller.tenant),
    )


@router.post("/match/batch", response_model=BatchOut, responses=documented(413))
async def match_batch(
    request: Request, body: BatchIn, caller: BatchCaller, services: ServicesDep
) -> Response:
    """Match many topics at once; an invalid topic gets an error entry, the others their
    matches (nothing is dropped). Each topic counts against the tenant's batch-topic rate.
    At most ``max_batch`` topics (10,000) and ``max_batch_matches`` matches (1,000,000:
    the ids answered plus the group members the choices examined): past either, 413. Runs
    off the event loop in slices of ``BATCH_SLICE`` topics, so other requests are served
    meanwhile; each slice waits for a place in ``services.fair`` (``fair_python`` for a
    tenant with groups, whose slices run Python), granted to the waiting tenants in turns.
    Stops between slices (and between topics into groups) when the client leaves or after
    ``TOPICSTORE_WORK_DEADLINE``."""
    return await batch_answer(services, caller, body, request.receive)


async def batch_answer(
    services: Services, caller: Caller, body: BatchIn, receive: Receive
) -> Response:
    """``POST /v1/match/batch`` once the caller is authenticated and the body is valid:
    the one implementation behind the route above and ``app.fastpath``. ``receive``: the
    request's, once its body is read (it tells when the client leaves)."""
    max_batch = services.settings.max_batch
    if len(body.topics) > max_batch:
        raise BatchTooLargeError(f"a batch holds at most {max_batch} topics")
    keys = body.keys
    if keys is not None and len(keys) != len(body.topics):
        raise InvalidRequestError(
            f"keys holds {len(keys)} keys for {len(body.topics)} topics: one per topic",
            code="keys_mismatch",
        )
    check_keys(keys)
    services.limiter.charge(BATCH_TOPICS, caller.tenant, len(body.topics))
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    parts = _batch_parts(services, table, tenant, body, receive)
    tracing = services.tracing
    answers, _ = await (
        parts if tracing is None else tracing.batch(tenant, body.dialect, len(body.topics), parts)
    )
    return Response(b'{"results":[' + b",".join(answers) + b"]}", media_type="application/json")


async def _batch_parts(
    services: Services, table: RoutingTable, tenant: str, body: BatchIn, receive: Receive
) -> tuple[list[bytes], int]:
    """The answers of a batch's slices, and the matches they took (``batch_answer``)."""
    topics, keys = body.topics, body.keys
    most = services.settings.max_batch_matches
    parts: list[bytes] = []
    matched = 0
    fair = services.fair_python if table.groups.has_groups(tenant) else services.fair
    async with services.work.watched(receive, "batch") as budget:
        for start in range(0, len(topics), BATCH_SLICE):
            end = start + BATCH_SLICE
            async with fair.slot(tenant):
                budget.check()  # the client left, or the deadline passed, meanwhile
                # Matching and encoding in one worker-thread hop: each hop is a GIL
                # hand-off with the event loop, and under concurrent batches a second hop
                # (encoding apart) cost a quarter of the rate.
                part, count = await run_in_threadpool(
                    batch,
                    table,
                    tenant,
                    body.dialect,
                    topics[start:end],
                    None if keys is None else keys[start:end],
                    budget,
                    most - matched,
                )
            matched += count
            if matched > most:
                raise BatchAnswerTooLargeError(
                    f"the answer would take more than {most:,} matches (max_batch_matches: "
                    "the ids answered plus the group members examined); send fewer topics "
                    "per batch"
                )
            parts.append(part)
    return parts, matched


@router.post("/match/headers", response_model=MatchOut, responses=documented(413))
async def match_headers(
    body: HeadersMatchIn, caller: MatchCaller, services: ServicesDep
) -> Response:
    """Content-based routing: subscriptions of kind ``headers`` satisfied by ``headers``."""
    key = hash_key(body.key, "")
    table = services.table()
    tenant = caller.tenant_for(body.tenant)
    ids = table.header_routes(tenant, body.headers)
    if body.key is None and table.groups.has_groups(tenant):
        key = orjson.dumps(body.headers, option=orjson.OPT_SORT_KEYS).decode()
    return _json(delivery(table, tenant, ids, key))
