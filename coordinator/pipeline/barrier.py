"""The producer side of the audit: the SDK barrier helper's table, or the user's own.

The barrier helper writes, in the producer's database and inside the local
transaction, `coordinator_barrier(transaction_id text PRIMARY KEY, outcome
text NOT NULL CHECK (outcome IN ('committed', 'rolled_back')), created_at
timestamptz NOT NULL DEFAULT now())`: 'committed' when the local transaction
committed, 'rolled_back' as the marker a check-back inserts when it had not.
"""

from __future__ import annotations

from coordinator.client.barrier import DEFAULT_TABLE

BARRIER_TABLE = DEFAULT_TABLE  # the table the SDK's barrier helper writes by default
BARRIER_KEY = "transaction_id"
BARRIER_COMMITTED = "outcome = 'committed'"

MATCH_FIELDS = ("transaction_id", "message_id")
PROPERTY_PREFIX = "property:"


def parse_match_on(match_on: str) -> tuple[str, str | None]:
    """(message column, property name): what --match-on names on the message side."""
    if match_on in MATCH_FIELDS:
        return match_on, None
    if match_on.startswith(PROPERTY_PREFIX) and len(match_on) > len(PROPERTY_PREFIX):
        return "properties", match_on[len(PROPERTY_PREFIX) :]
    raise ValueError(
        f"--match-on wants transaction_id, message_id or property:NAME, got {match_on!r}"
    )


def committed_condition(table: str, committed_when: str | None) -> str:
    """The SQL condition meaning "committed"; without one, a row's existence does."""
    if committed_when:
        return committed_when
    return BARRIER_COMMITTED if table == BARRIER_TABLE else "TRUE"
