"""States of check requests and how they reach a producer.

The string values are what the database stores (CHECK constraints in the
schema enforce them) and what the API and SQL views show.
"""

from __future__ import annotations

from enum import StrEnum


class CheckStatus(StrEnum):
    """Where the latest check-back of a half message stands (one row per message)."""

    NO_PRODUCER = "no_producer"  # due, but the group had no live instance: not counted
    PENDING = "pending"  # claimed and addressed to an instance, not yet handed over
    PUSHING = "pushing"  # being POSTed to the instance's check URL
    DELIVERED = "delivered"  # pulled by, or pushed to, the instance
    FAILED = "failed"  # the push failed; the message waits for its next check


class DispatchMode(StrEnum):
    PULL = "pull"  # the instance long-polls for its check requests
    PUSH = "push"  # the coordinator POSTs the check request to the instance's URL
