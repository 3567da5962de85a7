"""Ending a transaction: commit, rollback or unknown (EndTransactionProcessor).

Commit and rollback are one compare-and-set from `prepared`. A repeat of the
resolution already stored is an idempotent success that changes nothing, so
a duplicate END_TRANSACTION can never make a second copy (RocketMQ #5574). The
opposite resolution is refused: a message once rolled back (by its producer
or by a check-back) can never be committed (RocketMQ #8158).
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.core.database import fetch_one
from coordinator.errors import NotFound, ProducerGroupMismatch, StateConflict
from coordinator.models import EndRequest, EndResult
from coordinator.states import MessageState, Resolution, Source
from coordinator.validation import check_message_id, check_name


def _not_found(request: EndRequest) -> NotFound:
    if request.message_id is not None:
        return NotFound(
            f"no transaction {request.transaction_id!r} with message id {request.message_id!r}"
        )
    return NotFound(f"no transaction {request.transaction_id!r}")


def _check_owner(request: EndRequest, row: dict[str, Any]) -> None:
    if request.message_id is not None and row["message_id"] != request.message_id:
        raise _not_found(request)
    if row["producer_group"] != request.producer_group:
        raise ProducerGroupMismatch(
            f"transaction {request.transaction_id!r} belongs to producer group "
            f"{row['producer_group']!r}, not {request.producer_group!r}"
        )


async def end_transaction(conn: AsyncConnection[Any], request: EndRequest) -> EndResult:
    check_message_id(request.transaction_id, "transaction id")
    check_name("producer group", request.producer_group)
    if request.message_id is not None:
        check_message_id(request.message_id)

    if request.resolution is Resolution.UNKNOWN:
        # UNKNOWN changes nothing: the message waits for its check-back.
        row = await fetch_one(conn, "get_transaction", {"transaction_id": request.transaction_id})
        if row is None:
            raise _not_found(request)
        _check_owner(request, row)
        return _result(row, MessageState(row["state"]), changed=False)

    target = request.resolution.target_state
    assert target is not None
    row = await fetch_one(
        conn,
        "end_transaction",
        {
            "transaction_id": request.transaction_id,
            "producer_group": request.producer_group,
            "message_id": request.message_id,
            "to_state": target.value,
            "source": (Source.CHECK if request.from_check else Source.CLIENT).value,
            "detail": None,
        },
    )
    if row is None:
        raise _not_found(request)
    if row["new_state"] is not None:
        return _result(row, MessageState(row["new_state"]), changed=True)
    _check_owner(request, row)
    previous = MessageState(row["previous_state"])
    if previous is target:
        return _result(row, previous, changed=False)
    raise StateConflict(
        f"transaction {request.transaction_id!r} is already {previous.value}; "
        f"it cannot {request.resolution.value}",
        current_state=previous.value,
    )


def _result(row: dict[str, Any], state: MessageState, *, changed: bool) -> EndResult:
    return EndResult(
        offset=row["id"],
        message_id=row["message_id"],
        transaction_id=row["transaction_id"],
        state=state,
        changed=changed,
    )
