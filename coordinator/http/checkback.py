"""Producer instances, check sources and their check-backs over HTTP.

No SQL here: every route is one call into `core.checkback`.

An instance's routes act for its producer group, so they need a token that
may act as that group (as ending its transactions does); listing every
group's instances is for admins.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import MAX_POLL_REQUESTS
from coordinator.http.checkback_schemas import (
    CheckRequestOut,
    CheckSourceIn,
    ChecksOut,
    HeartbeatIn,
)
from coordinator.http.fields import GroupName, InstanceId
from coordinator.http.openapi import DocumentedRoute, described, example
from coordinator.http.route_table import coordinator
from coordinator.http.security import json_body, long_poll, principal
from coordinator.views.producers import (
    CheckSourceOut,
    CheckSourcesOut,
    ProducerOut,
    ProducersOut,
)

router = APIRouter(route_class=DocumentedRoute)

INSTANCE = "/v1/producers/{producer_group}/instances/{instance_id}"
# Names are checked by the core (domain.rules), which answers 400 with a sentence;
# their types only document the rules (fields.py).
ProducerGroupPath = Annotated[
    GroupName, Path(description="The producer group.", openapi_examples=example("order-svc"))
]
InstancePath = Annotated[
    InstanceId,
    Path(
        description="The producer instance, e.g. host@pid.",
        openapi_examples=example("10.0.0.7@4242"),
    ),
]


@router.post(
    INSTANCE + "/heartbeat",
    response_model=ProducerOut,
    dependencies=[Depends(json_body)],
    tags=["producers"],
    summary="Register a producer instance, or tell the coordinator it is alive",
)
async def heartbeat(
    producer_group: ProducerGroupPath,
    instance_id: InstancePath,
    body: HeartbeatIn | None = None,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ProducerOut:
    caller.require_producer_group(producer_group)
    producer = await core.checkback.producers.heartbeat(
        producer_group, instance_id, body.check_url if body else None
    )
    return ProducerOut.of(producer, ttl_seconds=core.configs.checkback.producer_ttl_seconds)


@router.delete(
    INSTANCE,
    status_code=204,
    tags=["producers"],
    summary="Remove a producer instance (clean shutdown); idempotent",
)
async def leave(
    producer_group: ProducerGroupPath,
    instance_id: InstancePath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> Response:
    caller.require_producer_group(producer_group)
    await core.checkback.producers.leave(producer_group, instance_id)
    return Response(status_code=204)


@router.get("/v1/producers", response_model=ProducersOut, tags=["producers"])
async def list_producers(
    producer_group: Annotated[GroupName | None, Query()] = None,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ProducersOut:
    if producer_group is None:
        caller.require_admin("list the producers of every group (give ?producer_group=)")
    else:
        caller.require_producer_group(producer_group)
    found = await core.checkback.producers.instances(producer_group)
    sources = await core.check_sources.list(producer_group)
    ttl = core.configs.checkback.producer_ttl_seconds
    return ProducersOut(
        producers=[ProducerOut.of(p, ttl_seconds=ttl) for p in found],
        check_sources=[CheckSourceOut.of(s) for s in sources],
    )


@router.get(
    INSTANCE + "/checks",
    response_model=ChecksOut,
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
    request: Request,
    producer_group: ProducerGroupPath,
    instance_id: InstancePath,
    wait_seconds: float = Query(default=20.0, ge=0, le=LONGEST_POLL_SECONDS),
    max_requests: int = Query(default=32, ge=1, le=MAX_POLL_REQUESTS),
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ChecksOut:
    caller.require_producer_group(producer_group)
    with long_poll(request, caller, wait_seconds):
        requests = await core.checkback.pull.poll(
            producer_group, instance_id, wait_seconds=wait_seconds, max_requests=max_requests
        )
    return ChecksOut(checks=[CheckRequestOut.of(r) for r in requests])


CHECK_SOURCE = "/v1/producer-groups/{producer_group}/check-source"


@router.put(
    CHECK_SOURCE,
    response_model=CheckSourceOut,
    dependencies=[Depends(json_body)],
    tags=["producers"],
    summary="Let the group's own database answer its check-backs (barrier table)",
    description=(
        "Registers, or replaces, the producer group's check source: the coordinator answers "
        "the group's check-backs itself with the barrier's rule in that database (mode "
        "`fallback`: while no instance of the group is live; `only`: always). The password "
        "is stored encrypted and never shown: the answer carries the URL with `***`."
    ),
)
async def put_check_source(
    producer_group: ProducerGroupPath,
    body: CheckSourceIn,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> CheckSourceOut:
    caller.require_producer_group(producer_group)
    source = await core.check_sources.set(
        producer_group, body.database_url, barrier_table=body.barrier_table, mode=body.mode
    )
    return CheckSourceOut.of(source)


@router.get(
    CHECK_SOURCE,
    response_model=CheckSourceOut,
    responses=described({404: "`not_found`: the producer group has no check source"}),
    tags=["producers"],
    summary="The group's check source (password masked) and how its last check went",
)
async def get_check_source(
    producer_group: ProducerGroupPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> CheckSourceOut:
    caller.require_producer_group(producer_group)
    return CheckSourceOut.of(await core.check_sources.get(producer_group))


@router.delete(
    CHECK_SOURCE,
    status_code=204,
    tags=["producers"],
    summary="Remove the group's check source (live instances answer again); idempotent",
)
async def delete_check_source(
    producer_group: ProducerGroupPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> Response:
    caller.require_producer_group(producer_group)
    await core.check_sources.remove(producer_group)
    return Response(status_code=204)


@router.get("/v1/check-sources", response_model=CheckSourcesOut, tags=["producers"])
async def list_check_sources(
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> CheckSourcesOut:
    """Every producer group's check source (admin), passwords masked."""
    caller.require_admin("list every group's check source")
    found = await core.check_sources.list()
    return CheckSourcesOut(check_sources=[CheckSourceOut.of(s) for s in found])
