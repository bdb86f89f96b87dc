"""The operator web console at ``/ui``: three static files (``console_static/``: one HTML
page, one ES module, one stylesheet) served by the API itself. The page holds no data and
needs no token to load; in the browser it is a client of this same API, with the bearer
token the operator types (kept in ``sessionStorage``, never in a URL), so it has no write
path or permission of its own.

A strict Content-Security-Policy keeps the token safe from injected script: only this
service's own script runs, no inline code, no other origin is contacted; the module writes
every value from the API as text, never as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

from fastapi import FastAPI
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, RedirectResponse

UI_URL: Final = "/ui"
ASSETS_URL: Final = "/ui/assets"
_STATIC: Final = Path(__file__).resolve().parent / "console_static"

Asset = Literal["console.js", "console.css"]
_MEDIA_TYPES: Final = {"js": "text/javascript", "css": "text/css"}

_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Small files that change with the service: always revalidate (ETag), never stale.
    "Cache-Control": "no-cache",
}


def install(app: FastAPI) -> None:
    """Add ``/ui`` (the page), ``/ui/`` (a redirect to it) and its two assets to ``app``."""

    @app.get(UI_URL, include_in_schema=False)
    async def console_page() -> FileResponse:
        return FileResponse(_STATIC / "index.html", media_type="text/html", headers=_HEADERS)

    @app.get(UI_URL + "/", include_in_schema=False)
    async def console_slash() -> RedirectResponse:
        return RedirectResponse(UI_URL, status_code=308)

    @app.get(ASSETS_URL + "/{name}", include_in_schema=False)
    async def console_asset(name: Annotated[Asset, PathParam()]) -> FileResponse:
        # Only the files named in ``Asset``: nothing else of the directory is served.
        media_type = _MEDIA_TYPES[name.rsplit(".", 1)[1]]
        return FileResponse(_STATIC / name, media_type=media_type, headers=_HEADERS)
