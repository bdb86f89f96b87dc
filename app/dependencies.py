"""FastAPI dependencies: the running services and the authenticated caller, as
``Annotated`` aliases the routes declare (``ServicesDep``, ``AdminCaller``, ``MatchCaller``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.auth import OPERATOR, Caller, authenticate
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


async def admin_caller(services: ServicesDep, credentials: Credentials) -> Caller:
    return authenticate(services.settings, _token(credentials))


async def match_caller(services: ServicesDep, credentials: Credentials) -> Caller:
    if not services.settings.match_auth:
        return OPERATOR
    return authenticate(services.settings, _token(credentials))


# async: these only compare strings, and a plain ``def`` dependency costs a thread-pool
# hand-off per request (it was 40% of the match endpoint's time).
AdminCaller = Annotated[Caller, Depends(admin_caller)]
MatchCaller = Annotated[Caller, Depends(match_caller)]
