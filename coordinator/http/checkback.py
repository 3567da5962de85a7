"""Producer instances, check sources and their check-backs over HTTP.

No SQL here: every route is one call into `core.checkback`.

An instance's routes act for its producer group, so they need a token that
may act as that group (as ending its transactions does); listing every
group's instances is for admins.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import MAX_POLL_REQUESTS
from coordinator.http import routes
from coordinator.http.checkback_schemas import (
    CheckRequestOut,
    CheckSourceIn,
    ChecksOut,
    HeartbeatIn,
)
from coordinator.http.fields import GroupName, InstanceId
from coordinator.http.openapi import DocumentedRoute, described, example
from coordinator.http.security import json_body, long_poll
from coordinator.views.producers import (
    CheckSourceOut,
    CheckSourcesOut,
    ProducerOut,
    ProducersOut,
)

router = APIRouter(tags=["producers"], route_class=DocumentedRoute)
table = routes.table.section(router)

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
OF_INSTANCE = {"producer_group": ProducerGroupPath, "instance_id": InstancePath}
OF_GROUP = {"producer_group": ProducerGroupPath}


@table.route(
    "POST",
    INSTANCE + "/heartbeat",
    body=HeartbeatIn | None,
    answer=ProducerOut,
    path_parameters=OF_INSTANCE,
    dependencies=[Depends(json_body)],
    summary="Register a producer instance, or tell the coordinator it is alive",
)
async def heartbeat(
    core: Coordinator,
    caller: Principal,
    body: HeartbeatIn | None,
    producer_group: str,
    instance_id: str,
) -> ProducerOut:
    caller.require_producer_group(producer_group)
    producer = await core.checkback.producers.heartbeat(
        producer_group, instance_id, body.check_url if body else None
    )
    return ProducerOut.of(producer, ttl_seconds=core.configs.checkback.producer_ttl_seconds)


@table.route(
    "DELETE",
    INSTANCE,
    answer=None,
    path_parameters=OF_INSTANCE,
    status_code=204,
    summary="Remove a producer instance (clean shutdown); idempotent",
)
async def leave(
    core: Coordinator, caller: Principal, producer_group: str, instance_id: str
) -> None:
    caller.require_producer_group(producer_group)
    await core.checkback.producers.leave(producer_group, instance_id)


@table.route(
    "GET",
    "/v1/producers",
    answer=ProducersOut,
    query_parameters={"producer_group": (Annotated[GroupName | None, Query()], None)},
)
async def list_producers(
    core: Coordinator, caller: Principal, producer_group: str | None
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


@table.route(
    "GET",
    INSTANCE + "/checks",
    answer=ChecksOut,
    takes_request=True,
    path_parameters=OF_INSTANCE,
    query_parameters={
        "wait_seconds": (float, Query(default=20.0, ge=0, le=LONGEST_POLL_SECONDS)),
        "max_requests": (int, Query(default=32, ge=1, le=MAX_POLL_REQUESTS)),
    },
    summary="Long poll: this instance's check requests",
    description=(
        "Returns at once when check requests are pending for this instance, else waits up "
        "to wait_seconds for one (an empty list when none came). Each request is handed "
        "over once; answer it with POST /v1/transactions/{transaction_id}/end and "
        '"from_check": true. Polling also keeps the instance live.'
    ),
)
async def poll_checks(
    core: Coordinator,
    caller: Principal,
    request: Request,
    producer_group: str,
    instance_id: str,
    wait_seconds: float,
    max_requests: int,
) -> ChecksOut:
    caller.require_producer_group(producer_group)
    with long_poll(request, caller, wait_seconds):
        requests = await core.checkback.pull.poll(
            producer_group, instance_id, wait_seconds=wait_seconds, max_requests=max_requests
        )
    return ChecksOut(checks=[CheckRequestOut.of(r) for r in requests])


CHECK_SOURCE = "/v1/producer-groups/{producer_group}/check-source"


@table.route(
    "PUT",
    CHECK_SOURCE,
    body=CheckSourceIn,
    answer=CheckSourceOut,
    path_parameters=OF_GROUP,
    dependencies=[Depends(json_body)],
    summary="Let the group's own database answer its check-backs (barrier table)",
    description=(
        "Registers, or replaces, the producer group's check source: the coordinator answers "
        "the group's check-backs itself with the barrier's rule in that database (mode "
        "`fallback`: while no instance of the group is live; `only`: always). The password "
        "is stored encrypted and never shown: the answer carries the URL with `***`."
    ),
)
async def put_check_source(
    core: Coordinator, caller: Principal, body: CheckSourceIn, producer_group: str
) -> CheckSourceOut:
    caller.require_producer_group(producer_group)
    source = await core.check_sources.set(
        producer_group, body.database_url, barrier_table=body.barrier_table, mode=body.mode
    )
    return CheckSourceOut.of(source)


@table.route(
    "GET",
    CHECK_SOURCE,
    answer=CheckSourceOut,
    path_parameters=OF_GROUP,
    responses=described({404: "`not_found`: the producer group has no check source"}),
    summary="The group's check source (password masked) and how its last check went",
)
async def get_check_source(
    core: Coordinator, caller: Principal, producer_group: str
) -> CheckSourceOut:
    caller.require_producer_group(producer_group)
    return CheckSourceOut.of(await core.check_sources.get(producer_group))


@table.route(
    "DELETE",
    CHECK_SOURCE,
    answer=None,
    path_parameters=OF_GROUP,
    status_code=204,
    summary="Remove the group's check source (live instances answer again); idempotent",
)
async def delete_check_source(core: Coordinator, caller: Principal, producer_group: str) -> None:
    caller.require_producer_group(producer_group)
    await core.check_sources.remove(producer_group)


@table.route("GET", "/v1/check-sources", answer=CheckSourcesOut)
async def list_check_sources(core: Coordinator, caller: Principal) -> CheckSourcesOut:
    """Every producer group's check source (admin), passwords masked."""
    caller.require_admin("list every group's check source")
    found = await core.check_sources.list()
    return CheckSourcesOut(check_sources=[CheckSourceOut.of(s) for s in found])
