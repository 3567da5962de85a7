"""Producer instances and their check-backs over HTTP; Prometheus /metrics.

No SQL here: every route is one call into `core.checkback`.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST

from coordinator.core import Coordinator
from coordinator.domain.rules import MAX_POLL_REQUESTS, MAX_POLL_WAIT_SECONDS
from coordinator.http.checkback_schemas import (
    CheckRequestOut,
    ChecksOut,
    HeartbeatIn,
    ProducerOut,
    ProducersOut,
)
from coordinator.http.routes import ERRORS, coordinator
from coordinator.metrics import exposition

router = APIRouter()

INSTANCE = "/v1/producers/{producer_group}/instances/{instance_id}"


@router.post(
    INSTANCE + "/heartbeat",
    response_model=ProducerOut,
    responses=ERRORS,
    tags=["producers"],
    summary="Register a producer instance, or tell the coordinator it is alive",
)
async def heartbeat(
    body: HeartbeatIn | None = None,
    producer_group: str = Path(),
    instance_id: str = Path(),
    core: Coordinator = Depends(coordinator),
) -> ProducerOut:
    producer = await core.checkback.heartbeat(
        producer_group, instance_id, body.check_url if body else None
    )
    return ProducerOut.of(producer, ttl_seconds=core.settings.producer_ttl_seconds)


@router.delete(
    INSTANCE,
    status_code=204,
    responses=ERRORS,
    tags=["producers"],
    summary="Remove a producer instance (clean shutdown); idempotent",
)
async def leave(
    producer_group: str = Path(),
    instance_id: str = Path(),
    core: Coordinator = Depends(coordinator),
) -> Response:
    await core.checkback.leave(producer_group, instance_id)
    return Response(status_code=204)


@router.get("/v1/producers", response_model=ProducersOut, responses=ERRORS, tags=["producers"])
async def list_producers(
    producer_group: str | None = Query(default=None),
    core: Coordinator = Depends(coordinator),
) -> ProducersOut:
    found = await core.checkback.producers(producer_group)
    ttl = core.settings.producer_ttl_seconds
    return ProducersOut(producers=[ProducerOut.of(p, ttl_seconds=ttl) for p in found])


@router.get(
    INSTANCE + "/checks",
    response_model=ChecksOut,
    responses=ERRORS,
    tags=["producers"],
    summary="Long poll: this instance's check requests",
    description=(
        "Returns at once when check requests are pending for this instance, else waits up "
        "to wait_seconds for one (an empty list when none came). Each request is handed "
        "over once; answer it with POST /v1/transactions/{transaction_id}/end and "
        '"from_check": true. Polling also keeps the instance live.'
    ),
)
async def poll_checks(
    producer_group: str = Path(),
    instance_id: str = Path(),
    wait_seconds: float = Query(default=20.0, ge=0, le=MAX_POLL_WAIT_SECONDS),
    max_requests: int = Query(default=32, ge=1, le=MAX_POLL_REQUESTS),
    core: Coordinator = Depends(coordinator),
) -> ChecksOut:
    requests = await core.checkback.poll(
        producer_group, instance_id, wait_seconds=wait_seconds, max_requests=max_requests
    )
    return ChecksOut(checks=[CheckRequestOut.of(r) for r in requests])


@router.get("/metrics", tags=["service"], summary="Prometheus metrics")
async def prometheus_metrics(core: Coordinator = Depends(coordinator)) -> Response:
    await core.checkback.refresh_gauges()
    return Response(content=exposition(), media_type=CONTENT_TYPE_LATEST)
