"""Ending a transaction: commit, rollback or unknown (EndTransactionProcessor).

Commit and rollback are one compare-and-set from `prepared`. A repeat of the
resolution already stored is an idempotent success that changes nothing, so
a duplicate END_TRANSACTION can never make a second copy (RocketMQ #5574). The
opposite resolution is refused: a message once rolled back (by its producer
or by a check-back) can never be committed (RocketMQ #8158).

Requests are ended in batches (one statement for many transaction ids) so
that concurrent single requests can share one database transaction (group
commit); each request still gets its own answer or error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection

from coordinator.db.queries import fetch_all, fetch_one
from coordinator.domain.errors import (
    CoordinatorError,
    InvalidMessage,
    NotFound,
    ProducerGroupMismatch,
    StateConflict,
)
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.domain.rules import check_message_id, check_name
from coordinator.domain.states import MessageState, Resolution, Source
from coordinator.metrics import Meter

log = logging.getLogger(__name__)


def validate_end(request: EndRequest) -> None:
    check_message_id(request.transaction_id, "transaction id")
    check_name("producer group", request.producer_group)
    if request.message_id is not None:
        check_message_id(request.message_id)


async def end_many(
    conn: AsyncConnection[Any], requests: Sequence[EndRequest], max_batch_size: int, meter: Meter
) -> list[EndResult | CoordinatorError]:
    if not requests:
        raise InvalidMessage("a batch needs at least one request")
    if len(requests) > max_batch_size:
        raise InvalidMessage(
            f"a batch holds at most {max_batch_size} requests, got {len(requests)}"
        )
    seen = {r.transaction_id for r in requests}
    if len(seen) != len(requests):
        raise InvalidMessage("a batch must not name the same transaction id twice")
    outcomes: list[EndResult | CoordinatorError | None] = [None] * len(requests)
    to_end: list[tuple[int, EndRequest]] = []
    for position, request in enumerate(requests):
        try:
            validate_end(request)
            if request.resolution is Resolution.UNKNOWN:
                outcomes[position] = await report_unknown(conn, request, meter)
            else:
                to_end.append((position, request))
        except CoordinatorError as error:
            outcomes[position] = error
    if to_end:
        ended = await end_validated(conn, [request for _, request in to_end], meter)
        for (position, _), outcome in zip(to_end, ended, strict=True):
            outcomes[position] = outcome
    return [o for o in outcomes if o is not None]


async def report_unknown(
    conn: AsyncConnection[Any], request: EndRequest, meter: Meter
) -> EndResult:
    """UNKNOWN changes nothing (the message waits for its check-back), but the
    transaction must exist and belong to the caller."""
    row = await fetch_one(conn, "get_transaction", {"transaction_id": request.transaction_id})
    if row is None:
        raise _not_found(request)
    _check_owner(request, row)
    if request.from_check:
        meter.check_back_answered(Resolution.UNKNOWN)
    return _result(row, MessageState(row["state"]), changed=False)


async def end_validated(
    conn: AsyncConnection[Any], requests: Sequence[EndRequest], meter: Meter
) -> list[EndResult | CoordinatorError]:
    """Commit/rollback validated requests with distinct transaction ids in one statement.

    The statement decides which requests resolve their message: each is counted
    here, as is each answer to a check-back, whatever its outcome.
    """
    targets = [r.resolution.target_state for r in requests]
    if any(t is None for t in targets):
        raise ValueError("end_validated takes commit and rollback requests only")
    rows = await fetch_all(
        conn,
        "end_transactions",
        {
            "transaction_ids": [r.transaction_id for r in requests],
            "producer_groups": [r.producer_group for r in requests],
            "message_ids": [r.message_id for r in requests],
            "to_states": [t.value for t in targets if t is not None],
            "sources": [(Source.CHECK if r.from_check else Source.CLIENT).value for r in requests],
        },
    )
    for request in requests:
        if request.from_check:
            meter.check_back_answered(request.resolution)
    return [_outcome(request, row, meter) for request, row in zip(requests, rows, strict=True)]


def _outcome(
    request: EndRequest, row: dict[str, Any], meter: Meter
) -> EndResult | CoordinatorError:
    if row["id"] is None:
        return _not_found(request)
    if row["new_state"] is not None:
        state = MessageState(row["new_state"])
        source = Source.CHECK if request.from_check else Source.CLIENT
        meter.resolved(state, source, row["age_seconds"])
        return _result(row, state, changed=True)
    try:
        _check_owner(request, row)
    except CoordinatorError as error:
        return error
    previous = MessageState(row["previous_state"])
    if previous is request.resolution.target_state:
        return _result(row, previous, changed=False)
    log.info(
        "%s of transaction %s refused: it is already %s",
        request.resolution.value,
        request.transaction_id,
        previous.value,
        extra=_message_fields(row, request),
    )
    return StateConflict(
        f"transaction {request.transaction_id!r} is already {previous.value}; "
        f"it cannot {request.resolution.value}",
        current_state=previous.value,
    )


def _message_fields(row: dict[str, Any], request: EndRequest) -> dict[str, Any]:
    """The ids a log line about this message carries (logs.py writes them as fields)."""
    return {
        "transaction_id": row["transaction_id"],
        "message_id": row["message_id"],
        "offset": row["id"],
        "producer_group": row["producer_group"],
        "from_check": request.from_check,
    }


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
        # Never names the owning group: that is another tenant's business.
        raise ProducerGroupMismatch(
            f"transaction {request.transaction_id!r} is not one of producer group "
            f"{request.producer_group!r}"
        )


def _result(row: dict[str, Any], state: MessageState, *, changed: bool) -> EndResult:
    return EndResult(
        offset=row["id"],
        message_id=row["message_id"],
        transaction_id=row["transaction_id"],
        state=state,
        changed=changed,
    )
