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

from typing import Annotated

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
    ReceivedMessageOut,
    ReceiveIn,
    ReceiveOut,
    RequeueAllIn,
    RequeueOut,
    SubscribeOut,
    SubscriptionIn,
)
from coordinator.http.fields import GroupName, PageLimit, Topic
from coordinator.http.openapi import DocumentedRoute, described, example
from coordinator.http.route_table import coordinator
from coordinator.http.security import json_body, long_poll, principal
from coordinator.views.consumers import (
    ConsumerLagOut,
    ConsumerLagsOut,
    DeadLetterOut,
    DeadLettersOut,
    SubscriptionOut,
    SubscriptionsOut,
)

GROUP = "/v1/consumer-groups/{consumer_group}"

router = APIRouter(
    tags=["consumers"], dependencies=[Depends(json_body)], route_class=DocumentedRoute
)

# Names are checked by the core (domain.rules), which answers 400 with a sentence;
# their types only document the rules (fields.py).
ConsumerGroupPath = Annotated[
    GroupName, Path(description="The consumer group.", openapi_examples=example("billing"))
]
TopicPath = Annotated[Topic, Path(openapi_examples=example("orders"))]
NO_SUBSCRIPTION = {404: "`not_found`: the group does not subscribe to the topic"}
NO_DELIVERY = {
    404: "`not_found`: the group has no unacked message with this receipt handle",
    409: "`receipt_handle_stale`: the message was received again (or its invisible "
    "duration changed) since this handle was issued",
}
NO_DEAD_LETTER = {
    404: "`not_found`: no such dead letter of the group, or the group no longer "
    "subscribes to its topic"
}


def _with_handle(operation: str) -> dict[str, object]:
    """An OpenAPI link from a receive to `operation`, with its first message's handle."""
    path = (GROUP + operation).replace("~", "~0").replace("/", "~1")
    return {
        "operationRef": f"#/paths/{path}/post",
        "parameters": {"consumer_group": "$request.path.consumer_group"},
        "requestBody": {"receipt_handle": "$response.body#/messages/0/receipt_handle"},
        "description": "The first message received, by its receipt handle.",
    }


@router.put(
    GROUP + "/subscriptions/{topic}",
    response_model=SubscribeOut,
    status_code=201,
    responses={
        200: {"model": SubscribeOut, "description": "Existing subscription changed"},
        **described(
            {
                400: "`invalid_filter_expression` (with `position`, the 1-based character): "
                "a SQL92 expression that does not parse; `invalid_request`: another rule broken"
            }
        ),
    },
    summary="Subscribe a consumer group to a topic (or change its subscription)",
)
async def subscribe(
    body: SubscriptionIn,
    consumer_group: ConsumerGroupPath,
    topic: TopicPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> JSONResponse:
    caller.require_consume(consumer_group, topic)
    result = await core.delivery.subscribe(
        consumer_group,
        topic,
        body.expression,
        filter_type=body.filter_type,
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
    consumer_group: ConsumerGroupPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> SubscriptionsOut:
    caller.require_consumer_group(consumer_group)
    found = await core.delivery.subscriptions(consumer_group)
    return SubscriptionsOut(subscriptions=[SubscriptionOut.of(s) for s in found])


@router.delete(
    GROUP + "/subscriptions/{topic}",
    response_model=SubscriptionOut,
    responses=described(NO_SUBSCRIPTION),
    summary="Unsubscribe: the group's unacked messages of the topic are dropped",
)
async def unsubscribe(
    consumer_group: ConsumerGroupPath,
    topic: TopicPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> SubscriptionOut:
    caller.require_consumer_group(consumer_group)
    return SubscriptionOut.of(await core.delivery.unsubscribe(consumer_group, topic))


@router.post(
    GROUP + "/receive",
    response_model=ReceiveOut,
    responses={
        200: {
            "links": {
                "Ack": _with_handle("/ack"),
                "Hide": _with_handle("/change-invisible-duration"),
            }
        },
        **described(
            {404: "`not_found`: the group subscribes to no topic (or not to the one given)"}
        ),
    },
    summary="Receive up to max_messages, long polling up to wait_seconds",
)
async def receive(
    request: Request,
    body: ReceiveIn,
    consumer_group: ConsumerGroupPath,
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
    responses=described(NO_DELIVERY),
    summary="Ack one message by its receipt handle (404 unknown, 409 stale)",
)
async def ack(
    body: AckIn,
    consumer_group: ConsumerGroupPath,
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
    consumer_group: ConsumerGroupPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> AckBatchOut:
    caller.require_consumer_group(consumer_group)
    results = await core.delivery.ack_batch(consumer_group, body.receipt_handles)
    return AckBatchOut(results=[AckOut.of(r) for r in results])


@router.post(
    GROUP + "/change-invisible-duration",
    response_model=ChangeInvisibleDurationOut,
    responses=described(NO_DELIVERY),
    summary="Keep a message invisible longer (or shorter); returns a new receipt handle",
)
async def change_invisible_duration(
    body: ChangeInvisibleDurationIn,
    consumer_group: ConsumerGroupPath,
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
    consumer_group: ConsumerGroupPath,
    topic: Annotated[Topic | None, Query()] = None,
    limit: Annotated[
        PageLimit, Query(description=f"1 to {DEAD_LETTERS_PAGE_LIMIT}, oldest first.")
    ] = 100,
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
    consumer_group: ConsumerGroupPath,
    body: RequeueAllIn | None = None,
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
    responses=described(NO_DEAD_LETTER),
    summary="Deliver one dead letter again, with a fresh attempt count",
)
async def requeue_one(
    consumer_group: ConsumerGroupPath,
    dead_letter_id: int = Path(ge=1, le=OFFSET_MAX),
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> RequeueOut:
    caller.require_admin("requeue dead letters")
    await core.delivery.requeue_dead_letter(dead_letter_id, consumer_group)
    return RequeueOut(requeued=1)


@router.get(GROUP + "/lag", response_model=ConsumerLagsOut, summary="A group's lag per topic")
async def lag(
    consumer_group: ConsumerGroupPath,
    core: Coordinator = Depends(coordinator),
    caller: Principal = Depends(principal),
) -> ConsumerLagsOut:
    caller.require_consumer_group(consumer_group)
    return ConsumerLagsOut(
        lag=[ConsumerLagOut.of(x) for x in await core.delivery.lag(consumer_group)]
    )
