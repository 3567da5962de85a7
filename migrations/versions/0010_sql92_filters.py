"""SQL92 filters on subscriptions, evaluated at fan-out.

`subscriptions.filter_type` says how `expression` selects messages: 'tag'
(as before, parsed into `tags`) or 'sql92', parsed by the core into
`filter`, a JSON tree (coordinator/domain/sql92.py) that the function
`sql92_matches` evaluates against a committed message's tag and properties.
`messages_changed` calls it for SQL92 subscriptions only, so a commit to a
topic without one does what it did before. A downgrade removes the SQL92
subscriptions (with their pending deliveries): the older fan-out would hand
them every message of their topics.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from coordinator.db.migration_sql import execute_block

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "subscriptions",
        sa.Column("filter_type", sa.Text, nullable=False, server_default=sa.text("'tag'")),
    )
    op.add_column("subscriptions", sa.Column("filter", postgresql.JSONB, nullable=True))
    op.create_check_constraint(
        op.f("ck_subscriptions_filter_type"), "subscriptions", "filter_type IN ('tag', 'sql92')"
    )
    op.create_check_constraint(
        op.f("ck_subscriptions_filter"),
        "subscriptions",
        "(filter_type = 'sql92') = (filter IS NOT NULL) AND (filter IS NULL OR tags IS NULL)",
    )
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    execute_block(__file__, "downgrade")
    op.drop_constraint(op.f("ck_subscriptions_filter"), "subscriptions", type_="check")
    op.drop_constraint(op.f("ck_subscriptions_filter_type"), "subscriptions", type_="check")
    op.drop_column("subscriptions", "filter")
    op.drop_column("subscriptions", "filter_type")
