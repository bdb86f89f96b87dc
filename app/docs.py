"""The API's documentation pages, served without the internet: Swagger UI at ``/docs``
and ReDoc at ``/redoc`` load their scripts and styles from this service, out of the
``fastapi-offline`` package (a maintained PyPI package that ships Swagger UI 5 and ReDoc 2
builds with their licences), through FastAPI's own ``get_swagger_ui_html`` and
``get_redoc_html``. FastAPI's defaults fetch them from a CDN: blank pages offline.

Every page here is a FastAPI route, ``/openapi.json`` too, so the metrics label it with
its path (FastAPI's built-in pages are plain Starlette routes, counted as "unmatched").
"""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated, Any, Final, Literal

from fastapi import FastAPI, Path
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

OPENAPI_URL: Final = "/openapi.json"
DOCS_URL: Final = "/docs"
REDOC_URL: Final = "/redoc"
OAUTH2_REDIRECT_URL: Final = "/docs/oauth2-redirect"
ASSETS_URL: Final = "/docs/assets"

Asset = Literal["swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"]
_MEDIA_TYPES: Final = {"js": "text/javascript", "css": "text/css", "png": "image/png"}


def install(app: FastAPI) -> None:
    """Add the schema, the two documentation pages and their assets to ``app`` (built
    with ``openapi_url``, ``docs_url`` and ``redoc_url`` None)."""
    assets = files("fastapi_offline") / "static"
    title = app.title

    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
        )

    @app.get(OAUTH2_REDIRECT_URL, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=OPENAPI_URL,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )

    @app.get(ASSETS_URL + "/{name}", include_in_schema=False)
    async def asset(name: Annotated[Asset, Path()]) -> Any:
        # Only the four files named in ``Asset``: nothing else of the package is served.
        path = assets / name
        media_type = _MEDIA_TYPES[name.rsplit(".", 1)[1]]
        return FileResponse(str(path), media_type=media_type)
