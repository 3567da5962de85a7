"""Routes: translate HTTP to core calls and back. No SQL here.

Every JSON route of the API is declared in `table` (route_table.py), here
and through its sections (consumers.py, checkback.py, status_page.py): once
each, for FastAPI and, the sending and ending ones (`hot=True`), for
hot_routes.HotRoutes, which calls the same handlers without FastAPI's
dispatch.

Every route but /health takes the request's principal (security.principal:
401 without a valid token) and makes the permission check that fits it
(403 with a sentence); domain/access.py says who may do what.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from coordinator.core import Coordinator
from coordinator.core.transactions import recall_topic
from coordinator.domain.access import Principal
from coordinator.domain.messages import EndRequest, EndResult, RecallResult, SendResult
from coordinator.domain.rules import ID_MAX_LENGTH, OFFSET_MAX
from coordinator.http.fields import GroupName, MessageId, Topic
from coordinator.http.openapi import DocumentedRoute, described, example
from coordinator.http.route_table import RouteTable, created_or_found
from coordinator.http.schemas import (
    BatchIn,
    BatchOut,
    EndBatchIn,
    EndBatchItemOut,
    EndBatchOut,
    EndIn,
    EndResultOut,
    ErrorOut,
    HealthOut,
    MessageIn,
    RecallIn,
    RecallOut,
    SendResultOut,
    StateCountOut,
    StatusOut,
)
from coordinator.views.consumers import ConsumerLagOut
from coordinator.views.messages import MessageOut

# What only these routes know of their errors; openapi.DocumentedRoute adds
# what follows from what each route takes (auth, body, names, the database).
REJECTED = {
    403: "`permission_denied`: the token may not send to the topic or as the producer group; "
    "`transactional_messages_rejected`: the server has reject_transactional_messages on",
}
ID_REUSED = {409: "`message_id_conflict`: the message id was used for a different message"}
NO_MESSAGE = {
    404: "`not_found`: no message has this id or offset, or none the token may read "
    "(the same answer: a token learns nothing of other producer groups' messages)"
}

router = APIRouter(route_class=DocumentedRoute)
table = RouteTable(router)

TRANSACTION_ID = Annotated[MessageId, Path(max_length=ID_MAX_LENGTH)]
MESSAGE_ID = Annotated[
    MessageId, Path(max_length=ID_MAX_LENGTH, openapi_examples=example("order-1001"))
]


def _health_status(answer: HealthOut) -> int:
    return 200 if answer.status == "ok" else 503


@table.route(
    "GET",
    "/health",
    answer=HealthOut,
    public=True,
    status_of=_health_status,
    responses={
        503: {
            # HealthOut when the ping fails; the shared error body
            # (database_unavailable) is allowed too, as on every route.
            "model": HealthOut | ErrorOut,
            "description": "PostgreSQL does not answer",
        }
    },
    tags=["service"],
)
async def health(core: Coordinator) -> HealthOut:
    if await core.inspection.database_ok():
        return HealthOut(status="ok", database="ok")
    return HealthOut(status="unavailable", database="unreachable")


@table.route(
    "POST",
    "/v1/transactions",
    body=MessageIn,
    answer=SendResultOut,
    hot=True,
    status_code=201,
    status_of=created_or_found,
    responses={
        200: {"model": SendResultOut, "description": "Idempotent retry"},
        **described(REJECTED | ID_REUSED),
    },
    tags=["transactions"],
    summary="Send a half (prepared) message",
)
async def prepare(core: Coordinator, caller: Principal, body: MessageIn) -> SendResult:
    caller.require_produce(body.topic, body.producer_group)
    return await core.transactions.prepare(body.to_message())


@table.route(
    "POST",
    "/v1/transactions/batch",
    body=BatchIn,
    answer=BatchOut,
    hot=True,
    responses=described(REJECTED | ID_REUSED),
    tags=["transactions"],
    summary="Send many half messages in one database transaction",
)
async def prepare_batch(
    core: Coordinator, caller: Principal, body: BatchIn
) -> dict[str, list[SendResult]]:
    _require_produce_all(caller, body)
    results = await core.transactions.prepare_batch([m.to_message() for m in body.messages])
    return {"results": results}


@table.route(
    "POST",
    "/v1/transactions/{transaction_id}/end",
    body=EndIn,
    answer=EndResultOut,
    hot=True,
    path_parameters={"transaction_id": TRANSACTION_ID},
    responses=described(
        {
            404: "`not_found`: no transaction has this id (and message_id, if given)",
            409: "`state_conflict` (with `current_state`): the opposite resolution is stored, "
            "or the message is no longer prepared; `producer_group_mismatch`: the "
            "transaction belongs to another producer group",
        }
    ),
    tags=["transactions"],
    summary="Commit, roll back, or report UNKNOWN for a half message",
)
async def end(core: Coordinator, caller: Principal, body: EndIn, transaction_id: str) -> EndResult:
    # The core refuses a group that is not the message's own (409), so a
    # token can end, and answer check-backs of, its own groups' messages only.
    caller.require_producer_group(body.producer_group)
    return await core.transactions.end(
        EndRequest(
            transaction_id=transaction_id,
            producer_group=body.producer_group,
            resolution=body.resolution_value,
            from_check=body.from_check,
            message_id=body.message_id,
        )
    )


@table.route(
    "POST",
    "/v1/transactions/end-batch",
    body=EndBatchIn,
    answer=EndBatchOut,
    hot=True,
    tags=["transactions"],
    summary="End many transactions in one database transaction, each with its own outcome",
)
async def end_batch(
    core: Coordinator, caller: Principal, body: EndBatchIn
) -> dict[str, list[EndBatchItemOut]]:
    # All or nothing, before anything is ended: a batch naming a group the
    # token may not act for is refused whole (403), like a batch send.
    for group in dict.fromkeys(item.producer_group for item in body.requests):
        caller.require_producer_group(group)
    requests = [
        EndRequest(
            transaction_id=item.transaction_id,
            producer_group=item.producer_group,
            resolution=item.resolution_value,
            from_check=item.from_check,
            message_id=item.message_id,
        )
        for item in body.requests
    ]
    outcomes = await core.transactions.end_batch(requests)
    return {
        "results": [
            EndBatchItemOut.of(request, outcome)
            for request, outcome in zip(requests, outcomes, strict=True)
        ]
    }


@table.route(
    "GET",
    "/v1/transactions/{transaction_id}",
    answer=MessageOut,
    path_parameters={"transaction_id": TRANSACTION_ID},
    responses=described(NO_MESSAGE),
    tags=["lookup"],
)
async def get_by_transaction(
    core: Coordinator, caller: Principal, transaction_id: str
) -> MessageOut:
    record = await core.inspection.get_message(transaction_id=transaction_id, reader=caller)
    return MessageOut.of(record)


@table.route(
    "POST",
    "/v1/messages",
    body=MessageIn,
    answer=SendResultOut,
    hot=True,
    status_code=201,
    status_of=created_or_found,
    responses={
        200: {"model": SendResultOut, "description": "Idempotent retry"},
        **described(ID_REUSED),
    },
    tags=["messages"],
    summary="Send a normal (non-transactional) message",
)
async def send(core: Coordinator, caller: Principal, body: MessageIn) -> SendResult:
    caller.require_produce(body.topic, body.producer_group)
    return await core.transactions.send(body.to_message())


@table.route(
    "POST",
    "/v1/messages/batch",
    body=BatchIn,
    answer=BatchOut,
    hot=True,
    responses=described(ID_REUSED),
    tags=["messages"],
)
async def send_batch(
    core: Coordinator, caller: Principal, body: BatchIn
) -> dict[str, list[SendResult]]:
    _require_produce_all(caller, body)
    results = await core.transactions.send_batch([m.to_message() for m in body.messages])
    return {"results": results}


@table.route(
    "POST",
    "/v1/messages/recall",
    body=RecallIn,
    answer=RecallOut,
    responses=described(
        {
            403: "`permission_denied`: the token may not send to the message's topic",
            404: "`not_found`: no message has this recall handle (or not on `topic`)",
            409: "`state_conflict`: the message was delivered already (its delivery time "
            "came), is a half message not yet committed, or is never delivered",
        }
    ),
    tags=["messages"],
    summary="Recall a delay or timer message before its delivery time",
)
async def recall(core: Coordinator, caller: Principal, body: RecallIn) -> RecallResult:
    caller.require_produce(recall_topic(body.recall_handle), None)
    return await core.transactions.recall(body.recall_handle, topic=body.topic)


@table.route(
    "GET",
    "/v1/messages/{message_id}",
    answer=MessageOut,
    path_parameters={"message_id": MESSAGE_ID},
    query_parameters={
        "producer_group": (Annotated[GroupName | None, Query()], None),
        "topic": (Annotated[Topic | None, Query()], None),
    },
    responses=described(
        {
            **NO_MESSAGE,
            400: "`ambiguous_message_id`: messages of several producer groups (or topics) "
            "the token may read use this id; give `producer_group` (or `topic`)",
        }
    ),
    tags=["lookup"],
    description="A message id is unique within its producer group (a message sent without "
    "one: within its topic). `producer_group` or `topic` picks one when the token may read "
    "several messages with the id.",
)
async def get_by_message_id(
    core: Coordinator,
    caller: Principal,
    message_id: str,
    producer_group: str | None,
    topic: str | None,
) -> MessageOut:
    record = await core.inspection.get_message(
        message_id=message_id, producer_group=producer_group, topic=topic, reader=caller
    )
    return MessageOut.of(record)


@table.route(
    "GET",
    "/v1/offsets/{offset}",
    answer=MessageOut,
    path_parameters={"offset": Annotated[int, Path(ge=1, le=OFFSET_MAX)]},
    responses=described(NO_MESSAGE),
    tags=["lookup"],
)
async def get_by_offset(core: Coordinator, caller: Principal, offset: int) -> MessageOut:
    # For its own producer group's tokens and admins only (its body is the
    # producer's data); any other token is told it does not exist.
    return MessageOut.of(await core.inspection.get_message(offset=offset, reader=caller))


def _require_produce_all(caller: Principal, body: BatchIn) -> None:
    for topic, group in dict.fromkeys((m.topic, m.producer_group) for m in body.messages):
        caller.require_produce(topic, group)


@table.route("GET", "/v1/status", answer=StatusOut, tags=["service"])
async def status(core: Coordinator, caller: Principal) -> StatusOut:
    caller.require_admin("read the status")
    current = await core.inspection.status()
    oldest = current.oldest_pending
    return StatusOut(
        pending_total=current.pending_total,
        oldest_pending_transaction_id=oldest.transaction_id if oldest else None,
        oldest_pending_age_seconds=oldest.age.total_seconds() if oldest else None,
        counts=[
            StateCountOut(
                producer_group=c.producer_group,
                topic=c.topic,
                state=c.state.value,
                count=c.count,
                oldest_born_at=c.oldest_born_at,
            )
            for c in current.counts
        ],
        consumer_lag=[ConsumerLagOut.of(lag) for lag in await core.delivery.lag()],
    )
