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

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.domain.rules import DEAD_LETTERS_PAGE_LIMIT, OFFSET_MAX
from coordinator.http import routes
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
from coordinator.http.route_table import created_or_found
from coordinator.http.security import json_body, long_poll
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
table = routes.table.section(router)

# Names are checked by the core (domain.rules), which answers 400 with a sentence;
# their types only document the rules (fields.py).
ConsumerGroupPath = Annotated[
    GroupName, Path(description="The consumer group.", openapi_examples=example("billing"))
]
TopicPath = Annotated[Topic, Path(openapi_examples=example("orders"))]
IN_GROUP = {"consumer_group": ConsumerGroupPath}
ON_TOPIC = {"consumer_group": ConsumerGroupPath, "topic": TopicPath}
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


@table.route(
    "PUT",
    GROUP + "/subscriptions/{topic}",
    body=SubscriptionIn,
    answer=SubscribeOut,
    path_parameters=ON_TOPIC,
    status_code=201,
    status_of=created_or_found,
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
    core: Coordinator, caller: Principal, body: SubscriptionIn, consumer_group: str, topic: str
) -> SubscribeOut:
    caller.require_consume(consumer_group, topic)
    result = await core.delivery.subscribe(
        consumer_group,
        topic,
        body.expression,
        filter_type=body.filter_type,
        fifo=body.fifo,
        max_delivery_attempts=body.max_delivery_attempts,
    )
    return SubscribeOut(
        **SubscriptionOut.of(result.subscription).model_dump(), created=result.created
    )


@table.route(
    "GET",
    GROUP + "/subscriptions",
    answer=SubscriptionsOut,
    path_parameters=IN_GROUP,
    summary="A group's subscriptions",
)
async def subscriptions(
    core: Coordinator, caller: Principal, consumer_group: str
) -> SubscriptionsOut:
    caller.require_consumer_group(consumer_group)
    found = await core.delivery.subscriptions(consumer_group)
    return SubscriptionsOut(subscriptions=[SubscriptionOut.of(s) for s in found])


@table.route(
    "DELETE",
    GROUP + "/subscriptions/{topic}",
    answer=SubscriptionOut,
    path_parameters=ON_TOPIC,
    responses=described(NO_SUBSCRIPTION),
    summary="Unsubscribe: the group's unacked messages of the topic are dropped",
)
async def unsubscribe(
    core: Coordinator, caller: Principal, consumer_group: str, topic: str
) -> SubscriptionOut:
    caller.require_consumer_group(consumer_group)
    return SubscriptionOut.of(await core.delivery.unsubscribe(consumer_group, topic))


@table.route(
    "POST",
    GROUP + "/receive",
    body=ReceiveIn,
    answer=ReceiveOut,
    takes_request=True,
    path_parameters=IN_GROUP,
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
    core: Coordinator,
    caller: Principal,
    request: Request,
    body: ReceiveIn,
    consumer_group: str,
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


@table.route(
    "POST",
    GROUP + "/ack",
    body=AckIn,
    answer=AckOut,
    path_parameters=IN_GROUP,
    responses=described(NO_DELIVERY),
    summary="Ack one message by its receipt handle (404 unknown, 409 stale)",
)
async def ack(core: Coordinator, caller: Principal, body: AckIn, consumer_group: str) -> AckOut:
    caller.require_consumer_group(consumer_group)
    await core.delivery.ack(consumer_group, body.receipt_handle)
    return AckOut(receipt_handle=body.receipt_handle, outcome="acked")


@table.route(
    "POST",
    GROUP + "/ack/batch",
    body=AckBatchIn,
    answer=AckBatchOut,
    path_parameters=IN_GROUP,
    summary="Ack many messages; each handle gets its outcome (acked, stale, not_found)",
)
async def ack_batch(
    core: Coordinator, caller: Principal, body: AckBatchIn, consumer_group: str
) -> AckBatchOut:
    caller.require_consumer_group(consumer_group)
    results = await core.delivery.ack_batch(consumer_group, body.receipt_handles)
    return AckBatchOut(results=[AckOut.of(r) for r in results])


@table.route(
    "POST",
    GROUP + "/change-invisible-duration",
    body=ChangeInvisibleDurationIn,
    answer=ChangeInvisibleDurationOut,
    path_parameters=IN_GROUP,
    responses=described(NO_DELIVERY),
    summary="Keep a message invisible longer (or shorter); returns a new receipt handle",
)
async def change_invisible_duration(
    core: Coordinator, caller: Principal, body: ChangeInvisibleDurationIn, consumer_group: str
) -> ChangeInvisibleDurationOut:
    caller.require_consumer_group(consumer_group)
    change = await core.delivery.change_invisible_duration(
        consumer_group, body.receipt_handle, body.invisible_seconds
    )
    return ChangeInvisibleDurationOut.of(change)


@table.route(
    "GET",
    GROUP + "/dead-letters",
    answer=DeadLettersOut,
    path_parameters=IN_GROUP,
    query_parameters={
        "topic": (Annotated[Topic | None, Query()], None),
        "limit": (
            Annotated[
                PageLimit, Query(description=f"1 to {DEAD_LETTERS_PAGE_LIMIT}, oldest first.")
            ],
            100,
        ),
    },
    summary="A group's dead letters",
)
async def dead_letters(
    core: Coordinator, caller: Principal, consumer_group: str, topic: str | None, limit: int
) -> DeadLettersOut:
    caller.require_consumer_group(consumer_group)
    letters = await core.delivery.dead_letters(consumer_group, topic=topic, limit=limit)
    return DeadLettersOut(dead_letters=[DeadLetterOut.of(d) for d in letters])


@table.route(
    "POST",
    GROUP + "/dead-letters/requeue",
    body=RequeueAllIn | None,
    answer=RequeueOut,
    path_parameters=IN_GROUP,
    summary="Deliver all of a group's dead letters (of one topic) again",
)
async def requeue_all(
    core: Coordinator, caller: Principal, body: RequeueAllIn | None, consumer_group: str
) -> RequeueOut:
    caller.require_admin("requeue dead letters")
    topic = body.topic if body is not None else None
    return RequeueOut(
        requeued=await core.delivery.requeue_dead_letters(consumer_group, topic=topic)
    )


@table.route(
    "POST",
    GROUP + "/dead-letters/{dead_letter_id}/requeue",
    answer=RequeueOut,
    path_parameters={**IN_GROUP, "dead_letter_id": Annotated[int, Path(ge=1, le=OFFSET_MAX)]},
    responses=described(NO_DEAD_LETTER),
    summary="Deliver one dead letter again, with a fresh attempt count",
)
async def requeue_one(
    core: Coordinator, caller: Principal, consumer_group: str, dead_letter_id: int
) -> RequeueOut:
    caller.require_admin("requeue dead letters")
    await core.delivery.requeue_dead_letter(dead_letter_id, consumer_group)
    return RequeueOut(requeued=1)


@table.route(
    "GET",
    GROUP + "/lag",
    answer=ConsumerLagsOut,
    path_parameters=IN_GROUP,
    summary="A group's lag per topic",
)
async def lag(core: Coordinator, caller: Principal, consumer_group: str) -> ConsumerLagsOut:
    caller.require_consumer_group(consumer_group)
    return ConsumerLagsOut(
        lag=[ConsumerLagOut.of(x) for x in await core.delivery.lag(consumer_group)]
    )
