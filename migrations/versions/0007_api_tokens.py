"""Bearer tokens of the API, stored as SHA-256 hashes with their grants.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _patterns(name: str) -> sa.Column:
    return sa.Column(
        name, postgresql.ARRAY(sa.Text), nullable=False, server_default=sa.text("'{}'::text[]")
    )


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("secret_sha256", sa.Text, nullable=False),
        _patterns("produce_topics"),
        _patterns("producer_groups"),
        _patterns("consume_groups"),
        _patterns("consume_topics"),
        sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column("metrics", sa.Boolean, nullable=False, server_default=sa.text("false")),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("name", name="uq_api_tokens_name"),
        sa.UniqueConstraint("secret_sha256", name="uq_api_tokens_secret_sha256"),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
