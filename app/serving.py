"""``topicstore serve``: uvicorn with the app, announcing itself only once it serves.

The banner (URL, docs, the development token) used to be printed before the app was built,
so a second ``make run`` on a DuckDB file the first one holds printed it and then failed.
Now it is printed after uvicorn has run the app's startup and bound its socket.

Connections: every connection goes through ``app.connections.GuardedHttpProtocol`` (a
deadline for the request's headers and body, a connection cap that sheds the slowest
instead of refusing newcomers, the parser's 400s in the envelope). The process first raises
its soft file-descriptor limit to the hard one, and the cap stays ``FD_RESERVE`` below it,
so ``accept()`` never meets EMFILE (which stopped the listening socket, health probes too).

``--workers N``: N processes share the listening socket, each with its own app, loader
and change listener (PostgreSQL only: a DuckDB file has one owning process).

Startup order: the store is opened and the routing table starts building before FastAPI,
uvicorn and the app's routes are imported (this module imports them only when it serves).
The build spends much of its time waiting for PostgreSQL or in Arrow with the GIL released,
and those imports (about half a second on a calm machine) run meanwhile; readiness still
waits for the whole build (``Loader.start``)."""

from __future__ import annotations

import logging
import os
import resource
import socket
import sys
from typing import TYPE_CHECKING, Final

import typer

from app import heap
from app.services import Services
from app.settings import Settings

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

log = logging.getLogger(__name__)

#: Descriptors kept free for everything but client connections: the store's pool and
#: listener, the DuckDB file, logs, the event loop's own.
FD_RESERVE: Final = 256
#: Connections the kernel queues before ``accept()`` (capped by net.core.somaxconn).
BACKLOG: Final = 4096


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the file-descriptor limit to %s: %s", target, e)
    return soft


def connection_cap(wanted: int, fd_limit: int) -> int:
    """``wanted`` connections, or as many as ``fd_limit`` leaves after ``FD_RESERVE``."""
    return max(1, min(wanted, fd_limit - FD_RESERVE))


#: How long a thread may hold the GIL while another waits for it (CPython's default is
#: 5 ms). Large matches, explains and searches run Python in a worker thread
#: (``app.work``); every request the event loop serves meanwhile waits for the GIL first,
#: so one tenant's flood of such work raised another's match p50 (figures under
#: docs/benchmarks.md, ``topicstore bench hostile``).
SWITCH_INTERVAL_S: Final = 0.0005


def _prepare_process() -> None:
    """What a serving process sets before it opens the store: no pandas, large freed
    blocks handed back to the system (``app.heap``), and short GIL slices
    (``SWITCH_INTERVAL_S``)."""
    heap.keep_pandas_out()
    heap.fix_mmap_threshold()
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def _guard_connections(settings: Settings) -> int:
    from app.connections import configure

    fd_limit = raise_fd_limit()
    cap = connection_cap(settings.max_connections, fd_limit)
    if cap < settings.max_connections:
        log.warning(
            "TOPICSTORE_MAX_CONNECTIONS=%d lowered to %d: the file-descriptor limit is %d",
            settings.max_connections,
            cap,
            fd_limit,
        )
    configure(settings.request_timeout, cap)
    return cap


def worker_app() -> FastAPI:
    """The app of one worker of ``--workers N`` (uvicorn calls it in each process; the
    settings come from the environment the parent set)."""
    from app.main import create_app

    _prepare_process()
    settings = Settings()
    _guard_connections(settings)
    return create_app(settings)


def _run_announcing(config: uvicorn.Config, banner: list[tuple[str, bool]]) -> None:
    """Serve ``config`` until stopped; print ``banner`` once the socket is bound."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                for line, loud in banner:
                    typer.secho(line, fg="yellow" if loud else None, bold=loud)

    AnnouncingServer(config).run()


def _config(settings: Settings, app: FastAPI | str) -> uvicorn.Config:
    import uvicorn

    from app.connections import GuardedHttpProtocol

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=settings.access_log,
        http=GuardedHttpProtocol,
        backlog=BACKLOG,
        workers=settings.workers,
        factory=isinstance(app, str),
        timeout_graceful_shutdown=settings.shutdown_grace,
    )


def serve(settings: Settings, *, announce_token: bool) -> None:
    """Build the app for ``settings`` (opening and migrating the store: a failure there
    raises before anything is announced) and serve it until stopped."""
    url = f"http://{settings.host}:{settings.port}"
    banner = [
        (f"topicstore on {settings.database_url}", False),
        (f"  API:   {url}", False),
        (f"  docs:  {url}/docs", False),
        (f"  console: {url}/ui", False),
    ]
    if announce_token:
        banner.append((f"  DEVELOPMENT MODE — admin token: {settings.admin_token}", True))
    if settings.workers > 1:
        _serve_workers(settings, banner)
        return
    _prepare_process()
    services = Services.open(settings)
    try:
        services.start_in_background()  # first: see the module docstring
        from app.main import create_app

        _guard_connections(settings)
        app = create_app(settings, services=services)
    except BaseException:
        services.close()
        raise
    _run_announcing(_config(settings, app), banner)


def _serve_workers(settings: Settings, banner: list[tuple[str, bool]]) -> None:
    """``settings.workers`` processes on one socket. The store is migrated here, once,
    before they start (N workers migrating an empty database at once would race)."""
    from uvicorn.supervisors import Multiprocess

    from migrations.runner import upgrade
    from store import Database

    db = Database(settings.database_url)
    try:
        upgrade(db.url)
    finally:
        db.dispose()
    raise_fd_limit()  # inherited by the workers
    # The workers read their settings from the environment: pass on what the command
    # line decided (the development token included).
    os.environ["TOPICSTORE_ADMIN_TOKEN"] = settings.admin_token or ""
    os.environ["TOPICSTORE_DEV"] = str(settings.dev).lower()
    os.environ["TOPICSTORE_WORKERS"] = "1"  # a worker is one process
    config = _config(settings, "app.serving:worker_app")
    sock = config.bind_socket()
    for line, loud in banner:
        typer.secho(line, fg="yellow" if loud else None, bold=loud)
    typer.echo(f"  workers: {settings.workers}")
    Multiprocess(config, sockets=[sock]).run()
