"""The HTTP protocol, without I/O: which call to make and how to read the answer.

The sync and asyncio clients share everything here (and in `_retry`, whether
to send a call again) and differ only in how they perform a `Call` and wait
between attempts.
"""

from __future__ import annotations

import base64
import math
import secrets
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from coordinator.client.errors import CoordinatorUnavailable, error_for
from coordinator.client.message import (
    LocalTransactionState,
    Message,
    RecallResult,
    ReceivedMessage,
    SendResult,
    SendStatus,
)


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    idempotent: bool = True  # safe to resend after a connection error or a 5xx
    timeout: float | None = None  # overrides the client's (long polls)
    # A 404 to a resend says an earlier attempt did the work and its answer
    # was lost (an ack: the delivery is gone), so the call succeeded.
    done_if_gone_on_resend: bool = False


def request_args(call: Call) -> dict[str, Any]:
    """The keyword arguments of httpx's `request` for `call`."""
    return {
        "method": call.method,
        "url": call.path,
        "json": call.json,
        "params": call.params,
        "timeout": call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT,
    }


def new_message_id() -> str:
    # Minted by the client, so a resent half message after a lost answer is an
    # idempotent retry on the coordinator instead of a second message. Led by
    # the time in milliseconds, then 80 random bits, like the coordinator's
    # own ids: new ids land at the right edge of its unique index, however
    # many messages it keeps.
    millis = time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF
    return f"{millis:012X}{secrets.token_hex(10).upper()}"


def message_json(msg: Message, producer_group: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "topic": msg.topic,
        "body_base64": base64.b64encode(msg.body_bytes).decode(),
        "keys": list(msg.keys),
        "properties": dict(msg.properties),
        "message_id": msg.message_id,
    }
    for name, value in (
        ("producer_group", producer_group),
        ("tags", msg.tags),
        ("check_immunity_seconds", msg.check_immunity_seconds),
        ("message_group", msg.message_group),
        ("delay_seconds", msg.delay_seconds),
        ("trace_context", msg.trace_context),
    ):
        if value is not None:
            body[name] = value
    if msg.deliver_at is not None:
        at = msg.deliver_at
        body["deliver_at"] = (at if at.tzinfo is not None else at.astimezone()).isoformat()
    return body


def prepare_call(producer_group: str, msg: Message) -> Call:
    if msg.message_id is None:
        msg.message_id = new_message_id()
    return Call("POST", "/v1/transactions", json=message_json(msg, producer_group))


def send_call(msg: Message) -> Call:
    if msg.message_id is None:
        msg.message_id = new_message_id()
    return Call("POST", "/v1/messages", json=message_json(msg, None))


def read_send(msg: Message, answer: dict[str, Any]) -> SendResult:
    msg.message_id = answer["message_id"]
    msg.transaction_id = answer.get("transaction_id")
    msg.offset = answer["offset"]
    return SendResult(
        send_status=SendStatus.SEND_OK,
        message_id=answer["message_id"],
        offset=answer["offset"],
        transaction_id=answer.get("transaction_id"),
        created=answer.get("created", True),
        recall_handle=answer.get("recall_handle"),
    )


def recall_call(recall_handle: str) -> Call:
    return Call("POST", "/v1/messages/recall", json={"recall_handle": recall_handle})


def read_recall(answer: dict[str, Any]) -> RecallResult:
    return RecallResult(
        message_id=answer["message_id"],
        offset=answer["offset"],
        topic=answer["topic"],
        changed=answer["changed"],
    )


def end_call(
    producer_group: str,
    transaction_id: str,
    state: LocalTransactionState,
    *,
    message_id: str | None,
    from_check: bool,
) -> Call:
    return Call(
        "POST",
        f"/v1/transactions/{transaction_id}/end",
        json={
            "producer_group": producer_group,
            "resolution": state.value,
            "from_check": from_check,
            "message_id": message_id,
        },
    )


def as_state(value: object) -> LocalTransactionState:
    """A listener's answer; None, anything unexpected or an error means UNKNOWN."""
    if isinstance(value, LocalTransactionState):
        return value
    try:
        return LocalTransactionState(str(value).lower())
    except ValueError:
        return LocalTransactionState.UNKNOWN


def message_from_json(data: dict[str, Any]) -> Message:
    """A Message from a check request or lookup."""
    return Message(
        topic=data["topic"],
        body=base64.b64decode(data["body_base64"]),
        tags=data.get("tags"),
        keys=list(data.get("keys") or []),
        properties=dict(data.get("properties") or {}),
        message_id=data.get("message_id"),
        message_group=data.get("message_group"),
        transaction_id=data.get("transaction_id"),
        offset=data.get("offset"),
        check_count=data.get("check_count"),
    )


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def received_from_json(data: dict[str, Any]) -> ReceivedMessage:
    return ReceivedMessage(
        message_id=data["message_id"],
        offset=data["offset"],
        topic=data["topic"],
        body=base64.b64decode(data["body_base64"]),
        tags=data.get("tags"),
        keys=list(data.get("keys") or []),
        properties=dict(data.get("properties") or {}),
        receipt_handle=data["receipt_handle"],
        delivery_attempt=data.get("delivery_attempt", 1),
        message_group=data.get("message_group"),
        born_at=_time(data.get("born_at")),
        committed_at=_time(data.get("committed_at")),
        deliver_at=_time(data.get("deliver_at")),
        trace_context=data.get("trace_context"),
    )


def retry_after(response: httpx.Response) -> float | None:
    """The answer's Retry-After in seconds (given as seconds or as a date), if any."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            at = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if at.tzinfo is None:  # an HTTP date is in GMT
            at = at.replace(tzinfo=UTC)
        seconds = (at - datetime.now(UTC)).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def read_response(response: httpx.Response) -> dict[str, Any]:
    """The JSON answer, or the typed error for a 4xx. 5xx raises CoordinatorUnavailable."""
    if response.status_code >= 500:
        raise CoordinatorUnavailable(
            f"the coordinator answered {response.status_code}: {response.text[:200]}",
            retry_after=retry_after(response),
        )
    try:
        body = response.json() if response.content else {}
    except ValueError:
        body = {"error": "http_error", "message": response.text[:200]}
    if response.status_code >= 400:
        raise error_for(response.status_code, body if isinstance(body, dict) else {})
    return body if isinstance(body, dict) else {"items": body}


def with_local_state(result: SendResult, state: LocalTransactionState) -> SendResult:
    return SendResult(
        send_status=result.send_status,
        message_id=result.message_id,
        offset=result.offset,
        transaction_id=result.transaction_id,
        local_state=state,
        created=result.created,
        recall_handle=result.recall_handle,
    )


# Producer instances and check-backs ------------------------------------------
def _instance_path(producer_group: str, instance_id: str) -> str:
    return f"/v1/producers/{producer_group}/instances/{instance_id}"


def heartbeat_call(producer_group: str, instance_id: str) -> Call:
    return Call("POST", _instance_path(producer_group, instance_id) + "/heartbeat", json={})


def leave_call(producer_group: str, instance_id: str) -> Call:
    return Call("DELETE", _instance_path(producer_group, instance_id))


def _check_source_path(producer_group: str) -> str:
    return f"/v1/producer-groups/{producer_group}/check-source"


def set_check_source_call(
    producer_group: str, database_url: str, barrier_table: str, mode: str
) -> Call:
    return Call(
        "PUT",
        _check_source_path(producer_group),
        json={"database_url": database_url, "barrier_table": barrier_table, "mode": mode},
    )


def remove_check_source_call(producer_group: str) -> Call:
    return Call("DELETE", _check_source_path(producer_group))


def poll_checks_call(
    producer_group: str, instance_id: str, wait_seconds: float, timeout: float
) -> Call:
    return Call(
        "GET",
        _instance_path(producer_group, instance_id) + "/checks",
        params={"wait_seconds": wait_seconds},
        # not resent automatically: the poll loop simply polls again
        idempotent=False,
        timeout=wait_seconds + timeout,
    )


def check_requests(answer: dict[str, Any]) -> list[Message]:
    return [message_from_json(item) for item in answer.get("checks", [])]


# Consumers -----------------------------------------------------------------
def _group_path(consumer_group: str) -> str:
    return f"/v1/consumer-groups/{consumer_group}"


def subscribe_call(
    consumer_group: str,
    topic: str,
    expression: str,
    *,
    fifo: bool,
    max_delivery_attempts: int,
    filter_type: str | None = None,
) -> Call:
    body: dict[str, Any] = {
        "expression": expression,
        "fifo": fifo,
        "max_delivery_attempts": max_delivery_attempts,
    }
    if filter_type is not None:
        # Only when asked: a coordinator without SQL92 filters refuses the field.
        body["filter_type"] = filter_type
    return Call("PUT", f"{_group_path(consumer_group)}/subscriptions/{topic}", json=body)


def receive_call(
    consumer_group: str,
    *,
    max_messages: int,
    invisible_seconds: float,
    wait_seconds: float,
    timeout: float,
    topic: str | None = None,
) -> Call:
    body: dict[str, Any] = {
        "max_messages": max_messages,
        "invisible_seconds": invisible_seconds,
        "wait_seconds": wait_seconds,
    }
    if topic is not None:
        body["topic"] = topic
    # Not resent: a lost answer's messages become visible again after their
    # invisible duration, which is the at-least-once contract anyway.
    return Call(
        "POST",
        f"{_group_path(consumer_group)}/receive",
        json=body,
        idempotent=False,
        timeout=wait_seconds + timeout,
    )


def received(answer: dict[str, Any]) -> list[ReceivedMessage]:
    return [received_from_json(item) for item in answer.get("messages", [])]


def ack_call(consumer_group: str, receipt_handle: str) -> Call:
    # An acked delivery is deleted: acking it again is 404 not_found.
    return Call(
        "POST",
        f"{_group_path(consumer_group)}/ack",
        json={"receipt_handle": receipt_handle},
        done_if_gone_on_resend=True,
    )


def change_invisible_call(consumer_group: str, receipt_handle: str, seconds: float) -> Call:
    return Call(
        "POST",
        f"{_group_path(consumer_group)}/change-invisible-duration",
        json={"receipt_handle": receipt_handle, "invisible_seconds": seconds},
    )


def with_receipt(message: ReceivedMessage, answer: dict[str, Any]) -> ReceivedMessage:
    return replace(
        message,
        receipt_handle=answer["receipt_handle"],
        delivery_attempt=answer.get("delivery_attempt", message.delivery_attempt),
    )
