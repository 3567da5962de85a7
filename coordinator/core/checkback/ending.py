"""Applying a check-back's answer: the half message ends as its producer would end it."""

from __future__ import annotations

import logging
from typing import Any

from coordinator.core.context import EndTransaction
from coordinator.domain.checkback import ClaimedCheck
from coordinator.domain.errors import CoordinatorError
from coordinator.domain.messages import EndRequest
from coordinator.domain.states import Resolution

log = logging.getLogger(__name__)


async def end_from_check(
    end: EndTransaction, claimed: ClaimedCheck, resolution: Resolution
) -> None:
    """End the claimed message with the answer a push or a database check carried."""
    try:
        await end(
            EndRequest(
                transaction_id=claimed.transaction_id,
                producer_group=claimed.producer_group,
                resolution=resolution,
                from_check=True,
                message_id=claimed.message_id,
            )
        )
    except CoordinatorError as error:
        # e.g. resolved the other way meanwhile: the first resolution stands
        log.info(
            "check-back answer %s for transaction %s not applied: %s",
            resolution.value,
            claimed.transaction_id,
            error.message,
            extra=claim_fields(claimed),
        )


def claim_fields(claimed: ClaimedCheck) -> dict[str, Any]:
    """The ids a log line about a claimed message carries (logs.py writes them as fields)."""
    return {
        "transaction_id": claimed.transaction_id,
        "message_id": claimed.request.message_id if claimed.request is not None else None,
        "offset": claimed.offset,
        "producer_group": claimed.producer_group,
        "check_count": claimed.check_count,
    }
