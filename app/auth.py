"""Who is calling: bearer tokens, each bound to one tenant, plus the operator's admin token
(any tenant). Tokens are compared in constant time. No FastAPI here: the command line
reads the development token through this module too (``app.dependencies`` wires it into
the routes)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass, replace

from app.refusals import UnauthorizedError, WrongTenantError
from app.settings import Settings
from store import DEFAULT_TENANT

log = logging.getLogger(__name__)


class ConfigurationError(Exception):
    """The service must not start as configured."""

    code = "insecure_configuration"


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a call came from, as the audit log records it: the request id (the client's
    ``X-Request-ID`` or one made for it) and the client's address."""

    request_id: str
    address: str


#: A call that came through no network: the command line's direct mode, tests.
LOCAL = Origin(request_id="-", address="local")


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller; ``tenant`` None is the operator, who may name any tenant.
    ``name`` names the token for the audit log without holding it (``token_name``);
    ``origin`` travels with the caller so ``AdminOperations`` can record it without
    knowing about HTTP."""

    tenant: str | None
    name: str = "operator"
    origin: Origin = LOCAL

    def at(self, origin: Origin) -> Caller:
        """This caller, calling from ``origin``."""
        return replace(self, origin=origin)

    def tenant_for(self, requested: str | None) -> str:
        """The tenant this call acts on: the caller's own, or for the operator the one
        requested (``default`` when none is)."""
        if self.tenant is None:
            return requested or DEFAULT_TENANT
        if requested is not None and requested != self.tenant:
            raise WrongTenantError("this token may only act on its own tenant")
        return self.tenant


#: The operator: what the command line acts as when it opens the store itself.
OPERATOR = Caller(None)


def authenticate(settings: Settings, token: str | None) -> Caller:
    """The caller ``token`` belongs to, or ``UnauthorizedError``."""
    if token is None:
        raise UnauthorizedError("send Authorization: Bearer <token>")
    given = token.encode("utf-8", "surrogateescape")
    found: Caller | None = None
    if settings.admin_token and hmac.compare_digest(given, settings.admin_token.encode()):
        found = OPERATOR
    for known, tenant in settings.tenant_tokens.items():
        # Compare with every token (no early exit), so timing says nothing about which.
        if hmac.compare_digest(given, known.encode()):
            found = Caller(tenant, token_name(known, tenant))
    if found is None:
        raise UnauthorizedError("unknown token")
    return found


def token_name(token: str, tenant: str) -> str:
    """How the audit log names a tenant's token: the tenant and the first 8 hex digits of
    the token's SHA-256 (tells a tenant's tokens apart; says nothing usable about them)."""
    return f"{tenant}:{hashlib.sha256(token.encode()).hexdigest()[:8]}"


def secure(settings: Settings) -> Settings:
    """Refuse to run without an admin token, unless in development mode, where one is made
    (and announced loudly) for this run."""
    if settings.admin_token:
        return settings
    if not settings.dev:
        raise ConfigurationError(
            "TOPICSTORE_ADMIN_TOKEN is not set. Set it (16+ characters), or start in "
            "development mode with TOPICSTORE_DEV=true (never in production)."
        )
    token = dev_token(settings)
    if token is None:
        token = secrets.token_urlsafe(24)
        path = settings.dev_token_file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(token + "\n", encoding="utf-8")
    log.warning("DEVELOPMENT MODE: no admin token configured; using %s", settings.dev_token_file)
    return settings.model_copy(update={"admin_token": token})


def dev_token(settings: Settings) -> str | None:
    """The token development mode made earlier (kept so restarts and the CLI reuse it)."""
    try:
        token = settings.dev_token_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token if len(token) >= 16 else None
