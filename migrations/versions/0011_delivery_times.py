"""Delivery times (delay and timer messages) and trace context on messages.

`messages.deliver_at` holds when a message becomes receivable (RocketMQ 5's
delivery_timestamp); a half message may carry one too, and becomes
receivable at the later of it and its commit. The fan-out
(`messages_changed()`) makes each delivery visible from that time and, when
it is still ahead, copies it into `deliveries.deliver_at`: that column is
never updated, so its partial index costs receives nothing and lets a
waiting receive find its group's next due delivery in one index lookup.
`messages.trace_context` keeps the producer's W3C traceparent for its
consumers.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.db.migration_sql import execute_block

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
