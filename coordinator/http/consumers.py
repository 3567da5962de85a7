"""Consumer routes: subscriptions, receive, ack, invisible duration, dead letters, lag.

RocketMQ 5 SimpleConsumer semantics over JSON. No SQL here: every route is
one call of core.delivery.

Each route acts for the consumer group in its path, so it needs a token that
may consume as that group (subscribing also one that may consume the
topic); requeueing dead letters is an operator's act and needs admin. A
receipt handle works only for the group it was issued to: the core's
queries match it together with the group.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.domain.rules import DEAD_LETTERS_PAGE_LIMIT, OFFSET_MAX
from coordinator.http.consumer_schemas import (
    AckBatchIn,
    AckBatchOut,
    AckIn,
    AckOut,
    ChangeInvisibleDurationIn,
    ChangeInvisibleDurationOut,
    ConsumerLagOut,
    ConsumerLagsOut,
    DeadLetterOut,
    DeadLettersOut,
    ReceivedMessageOut,
    ReceiveIn,
    ReceiveOut,
    RequeueAllIn,
    RequeueOut,
    SubscribeOut,
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionsOut,
)
from coordinator.http.routes import AUTH_ERRORS, coordinator
from coordinator.http.schemas import ErrorOut
from coordinator.http.security import json_body, long_poll, principal

ERRORS = {
    400: {"model": ErrorOut, "description": "Invalid name, expression, limit or handle"},
    **AUTH_ERRORS,
    404: {"model": ErrorOut, "description": "No such subscription, message or dead letter"},
    409: {"model": ErrorOut, "description": "Stale receipt handle (received again since)"},
    415: {"model": ErrorOut, "description": "Request body not sent as application/json"},
    422: {"model": ErrorOut, "description": "Malformed request body"},
}

GROUP = "/v1/consumer-groups/{consumer_group}"

router = APIRouter(tags=["consumers"], responses=ERRORS, dependencies=[Depends(json_body)])

# Names are checked by the core (domain.rules), which answers 400 with a sentence.
_group = Path(description="The consumer group.")
_topic = Path()


@router.put(
    GROUP + "/subscriptions/{topic}",
    response_model=SubscribeOut,
    status_code=201,
    responses={200: {"model": SubscribeOut, "description": "Existing subscription changed"}},
    summary="Subscribe a consumer group to a topic (or change its subscription)",
)
async def subscribe(
    body: SubscriptionIn,
    consumer_group: str = _group,
    topic: str = _topic,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> JSONResponse:
    caller.require_consume(consumer_group, topic)
    result = await core.delivery.subscribe(
        consumer_group,
        topic,
        body.expression,
        fifo=body.fifo,
        max_delivery_attempts=body.max_delivery_attempts,
    )
    out = SubscribeOut(
        **SubscriptionOut.of(result.subscription).model_dump(), created=result.created
    )
    return JSONResponse(out.model_dump(mode="json"), status_code=201 if result.created else 200)


@router.get(
    GROUP + "/subscriptions", response_model=SubscriptionsOut, summary="A group's subscriptions"
)
async def subscriptions(
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> SubscriptionsOut:
    caller.require_consumer_group(consumer_group)
    found = await core.delivery.subscriptions(consumer_group)
    return SubscriptionsOut(subscriptions=[SubscriptionOut.of(s) for s in found])


@router.delete(
    GROUP + "/subscriptions/{topic}",
    response_model=SubscriptionOut,
    summary="Unsubscribe: the group's unacked messages of the topic are dropped",
)
async def unsubscribe(
    consumer_group: str = _group,
    topic: str = _topic,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> SubscriptionOut:
    caller.require_consumer_group(consumer_group)
    return SubscriptionOut.of(await core.delivery.unsubscribe(consumer_group, topic))


@router.post(
    GROUP + "/receive",
    response_model=ReceiveOut,
    summary="Receive up to max_messages, long polling up to wait_seconds",
)
async def receive(
    request: Request,
    body: ReceiveIn,
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ReceiveOut:
    if body.topic is not None:
        caller.require_consume(consumer_group, body.topic)
    else:
        caller.require_consumer_group(consumer_group)
    with long_poll(request, caller, body.wait_seconds):
        messages = await core.delivery.receive(
            consumer_group,
            max_messages=body.max_messages,
            invisible_seconds=body.invisible_seconds,
            wait_seconds=body.wait_seconds,
            topic=body.topic,
        )
    return ReceiveOut(messages=[ReceivedMessageOut.of(m) for m in messages])


@router.post(
    GROUP + "/ack",
    response_model=AckOut,
    summary="Ack one message by its receipt handle (404 unknown, 409 stale)",
)
async def ack(
    body: AckIn,
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> AckOut:
    caller.require_consumer_group(consumer_group)
    await core.delivery.ack(consumer_group, body.receipt_handle)
    return AckOut(receipt_handle=body.receipt_handle, outcome="acked")


@router.post(
    GROUP + "/ack/batch",
    response_model=AckBatchOut,
    summary="Ack many messages; each handle gets its outcome (acked, stale, not_found)",
)
async def ack_batch(
    body: AckBatchIn,
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> AckBatchOut:
    caller.require_consumer_group(consumer_group)
    results = await core.delivery.ack_batch(consumer_group, body.receipt_handles)
    return AckBatchOut(results=[AckOut.of(r) for r in results])


@router.post(
    GROUP + "/change-invisible-duration",
    response_model=ChangeInvisibleDurationOut,
    summary="Keep a message invisible longer (or shorter); returns a new receipt handle",
)
async def change_invisible_duration(
    body: ChangeInvisibleDurationIn,
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ChangeInvisibleDurationOut:
    caller.require_consumer_group(consumer_group)
    change = await core.delivery.change_invisible_duration(
        consumer_group, body.receipt_handle, body.invisible_seconds
    )
    return ChangeInvisibleDurationOut.of(change)


@router.get(
    GROUP + "/dead-letters", response_model=DeadLettersOut, summary="A group's dead letters"
)
async def dead_letters(
    consumer_group: str = _group,
    topic: str | None = Query(default=None),
    limit: int = Query(default=100, description=f"1 to {DEAD_LETTERS_PAGE_LIMIT}, oldest first."),
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> DeadLettersOut:
    caller.require_consumer_group(consumer_group)
    letters = await core.delivery.dead_letters(consumer_group, topic=topic, limit=limit)
    return DeadLettersOut(dead_letters=[DeadLetterOut.of(d) for d in letters])


@router.post(
    GROUP + "/dead-letters/requeue",
    response_model=RequeueOut,
    summary="Deliver all of a group's dead letters (of one topic) again",
)
async def requeue_all(
    body: RequeueAllIn | None = None,
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> RequeueOut:
    caller.require_admin("requeue dead letters")
    topic = body.topic if body is not None else None
    return RequeueOut(
        requeued=await core.delivery.requeue_dead_letters(consumer_group, topic=topic)
    )


@router.post(
    GROUP + "/dead-letters/{dead_letter_id}/requeue",
    response_model=RequeueOut,
    summary="Deliver one dead letter again, with a fresh attempt count",
)
async def requeue_one(
    consumer_group: str = _group,
    dead_letter_id: int = Path(ge=1, le=OFFSET_MAX),
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> RequeueOut:
    caller.require_admin("requeue dead letters")
    await core.delivery.requeue_dead_letter(dead_letter_id, consumer_group)
    return RequeueOut(requeued=1)


@router.get(GROUP + "/lag", response_model=ConsumerLagsOut, summary="A group's lag per topic")
async def lag(
    consumer_group: str = _group,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ConsumerLagsOut:
    caller.require_consumer_group(consumer_group)
    return ConsumerLagsOut(
        lag=[ConsumerLagOut.of(x) for x in await core.delivery.lag(consumer_group)]
    )
