"""Identifiers the coordinator hands out."""

from __future__ import annotations

import uuid


def new_message_id() -> str:
    # Upper-case hex like RocketMQ's message ids; random so that any number of
    # coordinator nodes can mint them without coordination.
    return uuid.uuid4().hex.upper()


def new_transaction_id() -> str:
    return uuid.uuid4().hex
