"""The schema, defined once. Alembic migrations follow these tables.

`tests/integration/test_migrations.py` compares the migrated database against
this metadata, so a table changed here without a migration (or the reverse)
fails the suite.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Interval,
    LargeBinary,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from coordinator.states import MessageKind, MessageState, Source


def _one_of(column: str, values: list[str], *, nullable: bool = False) -> str:
    listed = ", ".join(f"'{v}'" for v in values)
    clause = f"{column} IN ({listed})"
    return f"{column} IS NULL OR {clause}" if nullable else clause


STATES = [s.value for s in MessageState]
SOURCES = [s.value for s in Source]
KINDS = [k.value for k in MessageKind]

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# One row per message, half or normal. `id` is the coordinator's offset: it
# grows with every stored message and never repeats.
messages = Table(
    "messages",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("message_id", Text, nullable=False, unique=True),
    Column("transaction_id", Text, nullable=True, unique=True),
    Column("kind", Text, nullable=False),
    Column("producer_group", Text, nullable=True),
    Column("topic", Text, nullable=False),
    Column("tags", Text, nullable=True),
    Column("keys", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("message_group", Text, nullable=True),
    Column("body", LargeBinary, nullable=False),
    Column("properties", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("state", Text, nullable=False),
    Column("check_count", Integer, nullable=False, server_default=text("0")),
    Column("check_immunity", Interval, nullable=True),
    Column("born_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("next_check_at", DateTime(timezone=True), nullable=True),
    Column("resolved_at", DateTime(timezone=True), nullable=True),
    Column("resolution_source", Text, nullable=True),
    CheckConstraint(_one_of("state", STATES), name="state"),
    CheckConstraint(_one_of("kind", KINDS), name="kind"),
    CheckConstraint(_one_of("resolution_source", SOURCES, nullable=True), name="resolution_source"),
    CheckConstraint("check_count >= 0", name="check_count"),
    # A transactional message always has its transaction id and producer group.
    CheckConstraint(
        "kind = 'normal' OR (transaction_id IS NOT NULL AND producer_group IS NOT NULL)",
        name="transactional_ids",
    ),
    # Only a prepared message is waiting; every other state is resolved.
    CheckConstraint(
        "(state = 'prepared') = (resolved_at IS NULL)",
        name="resolved_at_matches_state",
    ),
    # The check-back claim reads only this index: its size follows the number
    # of pending half messages, not the table.
    Index(
        "ix_messages_due_for_check",
        "next_check_at",
        postgresql_where=text("state = 'prepared'"),
    ),
    Index("ix_messages_topic_state", "topic", "state"),
    Index("ix_messages_resolved_at", "resolved_at"),
)

# The op log: every state change of every message, including its creation.
message_history = Table(
    "message_history",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "message_offset",
        BigInteger,
        ForeignKey("messages.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("source", Text, nullable=False),
    Column("from_state", Text, nullable=True),
    Column("to_state", Text, nullable=False),
    Column("detail", Text, nullable=True),
    CheckConstraint(_one_of("source", SOURCES), name="source"),
    CheckConstraint(_one_of("from_state", STATES, nullable=True), name="from_state"),
    CheckConstraint(_one_of("to_state", STATES), name="to_state"),
    Index("ix_message_history_message_offset", "message_offset"),
)
