"""Prometheus /metrics: what the node's meter counted, with the gauges read at scrape time.

The counters are the core's meter (`Coordinator.meter`); a scrape first
reads this process's pool and then the database's state (the overview), so
each scrape shows them as they are. It needs the metrics permission unless
the server was started with metrics_open.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.http.openapi import DocumentedRoute, errors
from coordinator.http.route_table import coordinator

router = APIRouter(route_class=DocumentedRoute)


@router.get(
    "/metrics",
    # Prometheus' text format, not JSON: what the OpenAPI document says it is.
    # A response class without a media type, so that FastAPI documents the
    # 200 only as declared below and the errors as what they are, JSON.
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
        # Not through security.principal (see below), so not derived.
        **errors(401, 403),
    },
    tags=["service"],
    summary="Prometheus metrics",
)
async def prometheus_metrics(
    request: Request, core: Coordinator = Depends(coordinator)
) -> Response:
    # Not Depends(principal): with metrics_open a scraper sends no token at all.
    if not core.configs.http.metrics_open:
        authenticator: Authenticator = request.app.state.authenticator
        authenticator.authenticate(request.headers.get("authorization")).require_metrics()
    meter = core.meter
    # Before asking the pool for a connection: when it has none to give, this
    # scrape shows the requests waiting for one (this one is not yet).
    meter.set_pool_stats(core.pool.get_stats())
    # The database's gauges: the overview without its resolutions per minute and its
    # storage (the retention rounds set those gauges).
    meter.set_database_gauges(
        await core.overview.read(minutes=0, storage=False),
        core.configs.http.max_metric_label_values,
    )
    return Response(content=meter.exposition(), media_type=CONTENT_TYPE_LATEST)
