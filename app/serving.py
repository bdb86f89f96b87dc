"""``topicstore serve``: uvicorn with the app, announcing itself only once it serves.

The banner (URL, docs, the development token) used to be printed before the app was built,
so a second ``make run`` on a DuckDB file the first one holds printed it and then failed.
Now it is printed after uvicorn has run the app's startup and bound its socket."""

from __future__ import annotations

import socket

import typer
import uvicorn

from app.main import create_app
from app.settings import Settings


class _AnnouncingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, banner: list[tuple[str, bool]]) -> None:
        super().__init__(config)
        self.banner = banner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            for line, loud in self.banner:
                typer.secho(line, fg="yellow" if loud else None, bold=loud)


def serve(settings: Settings, *, announce_token: bool) -> None:
    """Build the app for ``settings`` (opening and migrating the store: a failure there
    raises before anything is announced) and serve it until stopped."""
    app = create_app(settings)
    url = f"http://{settings.host}:{settings.port}"
    banner = [
        (f"topicstore on {settings.database_url}", False),
        (f"  API:   {url}", False),
        (f"  docs:  {url}/docs", False),
    ]
    if announce_token:
        banner.append((f"  DEVELOPMENT MODE — admin token: {settings.admin_token}", True))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=settings.access_log,
    )
    _AnnouncingServer(config, banner).run()
