"""FastAPI dependencies: the running services and the authenticated caller, as
``Annotated`` aliases the routes declare (``ServicesDep``, ``AdminCaller``, ``MatchCaller``,
``BatchCaller``). Authenticating a caller also charges its tenant's rate bucket (a refusal
is a 429 before the route runs) and, for admin calls, notes where the call came from (the
audit log records it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from app.auth import OPERATOR, Caller, Origin, authenticate
from app.ratelimit import ADMIN, MATCH
from app.services import Services


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


# Declares the scheme in OpenAPI (and the docs' "Authorize" button); refusals stay ours.
_bearer_scheme = HTTPBearer(
    auto_error=False, description="TOPICSTORE_ADMIN_TOKEN, or a token of TENANT_TOKENS."
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)]


def _token(credentials: HTTPAuthorizationCredentials | None) -> str | None:
    return None if credentials is None else credentials.credentials


def _origin(request: HTTPConnection) -> Origin:
    """The request id ``app.middleware.RequestId`` set, and the client's address."""
    request_id = getattr(request.state, "request_id", None) or "-"
    address = request.client.host if request.client is not None else "unknown"
    return Origin(request_id=request_id, address=address)


async def admin_caller(request: Request, services: ServicesDep, credentials: Credentials) -> Caller:
    """The caller, charged one admin request (a bulk request too: it is one request)."""
    caller = authenticate(services.settings, _token(credentials))
    services.limiter.charge(ADMIN, caller.tenant)
    return caller.at(_origin(request))


async def batch_caller(services: ServicesDep, credentials: Credentials) -> Caller:
    """The caller of a batch match; the route charges its topics (``BATCH_TOPICS``)."""
    if not services.settings.match_auth:
        return OPERATOR
    return authenticate(services.settings, _token(credentials))


async def match_caller(services: ServicesDep, credentials: Credentials) -> Caller:
    """The caller, charged one match request."""
    caller = await batch_caller(services, credentials)
    services.limiter.charge(MATCH, caller.tenant)
    return caller


async def request_match_caller(request: HTTPConnection, services: Services) -> Caller:
    """``match_caller`` for a request that FastAPI's dependency solving does not see
    (``app.fastpath``): the same bearer scheme reads the token, the same function
    authenticates and charges it."""
    return await match_caller(services, await _bearer_scheme(request))


async def request_batch_caller(request: HTTPConnection, services: Services) -> Caller:
    """``batch_caller`` for a request ``app.fastpath`` answers (see above)."""
    return await batch_caller(services, await _bearer_scheme(request))


async def request_admin_caller(request: Request, services: Services) -> Caller:
    """``admin_caller`` for a single write ``app.fastpath`` answers (see above)."""
    return await admin_caller(request, services, await _bearer_scheme(request))


async def optional_caller(services: ServicesDep, credentials: Credentials) -> Caller | None:
    """None without a token (a probe, a scraper); the caller for a known token; 401 for
    an unknown one (a mistyped scraper token must not pass silently as anonymous)."""
    if credentials is None:
        return None
    return authenticate(services.settings, credentials.credentials)


# async: these only compare strings, and a plain ``def`` dependency costs a thread-pool
# hand-off per request (it was 40% of the match endpoint's time).
AdminCaller = Annotated[Caller, Depends(admin_caller)]
MatchCaller = Annotated[Caller, Depends(match_caller)]
BatchCaller = Annotated[Caller, Depends(batch_caller)]
OptionalCaller = Annotated[Caller | None, Depends(optional_caller)]
