"""The status page (`/`, `/status`) and the JSON it reads, GET /v1/overview.

The page is plain HTML, CSS and a little JavaScript from the package
(coordinator/http/static/): no CDN, no build step. It is served to anyone,
since it holds no figure; the figures come from /v1/overview, which needs a
token with the metrics or admin permission once tokens exist (the page asks
for one when refused and keeps it in the tab's sessionStorage). A Content
Security Policy lets the page load and call this server only.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, FastAPI, Query
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.domain.overview import DEFAULT_MINUTES, MAX_MINUTES
from coordinator.http import routes
from coordinator.http.openapi import DocumentedRoute
from coordinator.views.overview import OverviewOut

STATIC = "/static"
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

router = APIRouter(route_class=DocumentedRoute)
# /v1/overview is the API's (JSON); the page itself is HTML, served as FastAPI's.
table = routes.table.section(router)


@table.route(
    "GET",
    "/v1/overview",
    answer=OverviewOut,
    query_parameters={
        "minutes": (
            int,
            Query(
                default=DEFAULT_MINUTES,
                ge=1,
                le=MAX_MINUTES,
                description="Resolutions per minute over this many minutes, "
                "the current one included.",
            ),
        )
    },
    tags=["service"],
    summary="What the status page shows: pending half messages, resolutions per minute, "
    "check-backs, producers, consumer groups",
    description=(
        "Read in one database snapshot, from index ranges only (no scan of messages, their "
        "history or deliveries). Needs the metrics or admin permission once tokens exist."
    ),
)
async def overview(core: Coordinator, caller: Principal, minutes: int) -> OverviewOut:
    caller.require_metrics()
    return OverviewOut.of(await core.overview.read(minutes))


def _page() -> str:
    return files("coordinator.http").joinpath("static", "status.html").read_text()


@router.get("/", include_in_schema=False)
@router.get("/status", include_in_schema=False)
async def status_page() -> HTMLResponse:
    return HTMLResponse(
        _page(), headers={"Content-Security-Policy": POLICY, "Cache-Control": "no-cache"}
    )


def install_status_page(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(STATIC, StaticFiles(packages=[("coordinator.http", "static")]), name="static")
