"""Identifiers the coordinator hands out."""

from __future__ import annotations

import secrets


def new_message_id() -> str:
    # Upper-case hex like RocketMQ's message ids; 128 random bits, so that any
    # number of coordinator nodes can mint them without coordination.
    return secrets.token_hex(16).upper()


def new_transaction_id() -> str:
    return secrets.token_hex(16)
