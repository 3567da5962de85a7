"""/docs (Swagger UI), served whole by the coordinator: it works offline.

FastAPI's own page loads Swagger UI from a CDN, so it stays blank on a
machine without internet. Its files come here from the installed
`fastapi-offline` package, which carries Swagger UI's dist files (only its
static files are used), and the page references nothing but this server.
FastAPI's /redoc is not served: ReDoc's page fetches its logo from
Redocly's CDN.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def install_api_docs(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Add /docs to an app made with docs_url=None (and redoc_url=None)."""
    app.mount(ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-assets")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - API",
            oauth2_redirect_url=OAUTH2_REDIRECT,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            # Swagger UI would otherwise ask validator.swagger.io about the document.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
