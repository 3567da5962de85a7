"""The schema's tables, defined once. Alembic migrations follow these tables.

Their storage parameters, the trigger functions, the triggers and the views
are SQL in `coordinator/db/sql/schema/` (`coordinator.db.schema_objects`).

`tests/integration/test_migrations.py` compares the migrated database against
this metadata, so a table changed here without a migration (or the reverse)
fails the suite.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
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
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from coordinator.domain.check_sources import CheckSourceMode
from coordinator.domain.delivery import FilterType
from coordinator.domain.states import CheckStatus, DispatchMode, MessageKind, MessageState, Source


def _one_of(column: str, values: list[str], *, nullable: bool = False) -> str:
    listed = ", ".join(f"'{v}'" for v in values)
    clause = f"{column} IN ({listed})"
    return f"{column} IS NULL OR {clause}" if nullable else clause


STATES = [s.value for s in MessageState]
SOURCES = [s.value for s in Source]
KINDS = [k.value for k in MessageKind]
FILTER_TYPES = [f.value for f in FilterType]

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
    # Unique within its producer group, or within its topic for a message
    # sent without one (the two indexes below), never across groups.
    Column("message_id", Text, nullable=False),
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
    # Not receivable before this time (a delay or timer message); a half
    # message with one becomes receivable at the later of it and its commit.
    Column("deliver_at", DateTime(timezone=True), nullable=True),
    # The producer's W3C traceparent, handed to consumers with the message.
    Column("trace_context", Text, nullable=True),
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
    # Led by message_id: a lookup by id alone reads them too.
    Index(
        "uq_messages_message_id_producer_group",
        "message_id",
        "producer_group",
        unique=True,
        postgresql_where=text("producer_group IS NOT NULL"),
    ),
    Index(
        "uq_messages_message_id_topic",
        "message_id",
        "topic",
        unique=True,
        postgresql_where=text("producer_group IS NULL"),
    ),
    # The report's hours of birth, by range (messages arrive in birth order).
    Index("ix_messages_born_at", "born_at", postgresql_using="brin"),
)

# The op log: every state change of every message, including its creation.
message_history = Table(
    "message_history",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    # No foreign key: a history row is written by the statement that writes
    # its message, and a per-row key check cost more than the row.
    # Deleting a message deletes its history (trigger messages_deleted).
    Column("message_offset", BigInteger, nullable=False),
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

# A consumer group's subscription to a topic. `expression` is the filter as
# given; by `filter_type`, `tags` is the parsed tag filter (NULL for `*`) or
# `filter` the parsed SQL92 filter (coordinator/domain/sql92.py). The trigger
# on messages matches committed messages against them. Only messages
# committed after the subscription exists reach the group (RocketMQ's
# CONSUME_FROM_LAST_OFFSET).
subscriptions = Table(
    "subscriptions",
    metadata,
    Column("consumer_group", Text, primary_key=True),
    Column("topic", Text, primary_key=True),
    Column("expression", Text, nullable=False),
    Column("tags", ARRAY(Text), nullable=True),
    Column("fifo", Boolean, nullable=False, server_default=text("false")),
    Column("max_delivery_attempts", Integer, nullable=False, server_default=text("16")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # Added after the rest (migration 0010), hence last.
    Column("filter_type", Text, nullable=False, server_default=text("'tag'")),
    Column("filter", JSONB, nullable=True),
    # When a receive of the group last asked (migration 0013), recorded by the
    # retention job from what each node saw, not by the receive itself: NULL
    # until then, and the group counts as idle from its creation.
    Column("last_received_at", DateTime(timezone=True), nullable=True),
    CheckConstraint(_one_of("filter_type", FILTER_TYPES), name="filter_type"),
    CheckConstraint(
        "(filter_type = 'sql92') = (filter IS NOT NULL) AND (filter IS NULL OR tags IS NULL)",
        name="filter",
    ),
    CheckConstraint("max_delivery_attempts >= 1", name="max_delivery_attempts"),
    Index("ix_subscriptions_topic", "topic"),
)

# One row per (committed message, subscribed consumer group) until the group
# acks it: the table holds only unacked work, so it stays small. A row is
# available while visible_at <= now(); a receive pushes visible_at forward
# (in flight), counts the attempt and issues a new receipt handle. None of
# the columns a receive or change of invisible duration updates is indexed,
# so those updates stay HOT.
deliveries = Table(
    "deliveries",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    # No foreign keys: the fan-out trigger writes a delivery from the
    # message and subscription it has just read (and key-share locked), and
    # deleting either deletes its deliveries (triggers messages_deleted,
    # subscriptions_deleted), as ON DELETE CASCADE did.
    Column("message_offset", BigInteger, nullable=False),
    Column("consumer_group", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("message_group", Text, nullable=True),
    Column("committed_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("visible_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("receipt_handle", Text, nullable=True),
    # The message's delivery time, when it was still ahead at the fan-out
    # (NULL otherwise). Never updated, so receives stay HOT updates.
    Column("deliver_at", DateTime(timezone=True), nullable=True),
    # When a dead letter was moved back here (NULL: delivered at the commit).
    # The unacked retention counts from it too (migration 0016, hence last).
    Column("requeued_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("message_offset", "consumer_group"),
    CheckConstraint("attempts >= 0", name="attempts"),
    # The claim walks a group's rows in commit order.
    Index("ix_deliveries_consumer_group_id", "consumer_group", "id"),
    # FIFO: is an earlier (or in-flight) message of the same message group unacked?
    Index(
        "ix_deliveries_fifo",
        "consumer_group",
        "topic",
        "message_group",
        "id",
        postgresql_where=text("message_group IS NOT NULL"),
    ),
    # A waiting receive sleeps until its group's next delayed delivery is due.
    Index(
        "ix_deliveries_delayed",
        "consumer_group",
        "deliver_at",
        postgresql_where=text("deliver_at IS NOT NULL"),
    ),
    # A requeued delivery has a newer id than its commit time says: the
    # oldest pending commit is the head of this or of the primary key.
    Index(
        "ix_deliveries_requeued_committed_at",
        "committed_at",
        postgresql_where=text("requeued_at IS NOT NULL"),
    ),
)

# Deliveries that used up their subscription's max_delivery_attempts: the
# group's dead-letter queue, kept until requeued (or the message is deleted).
dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column(
        "message_offset",
        BigInteger,
        ForeignKey("messages.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("consumer_group", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("committed_at", DateTime(timezone=True), nullable=False),
    Column("dead_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    UniqueConstraint("message_offset", "consumer_group"),
    Index("ix_dead_letters_consumer_group_id", "consumer_group", "id"),
    # The retention job takes the oldest dead letters first.
    Index("ix_dead_letters_dead_at", "dead_at"),
)

# Producer instances, per producer group. An instance is live while it was
# heard from (heartbeat or long poll) within producer_ttl_seconds; a check
# URL makes it a push instance, otherwise it pulls its check requests.
producers = Table(
    "producers",
    metadata,
    Column("producer_group", Text, primary_key=True),
    Column("instance_id", Text, primary_key=True),
    Column("check_url", Text, nullable=True),
    Column("registered_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("last_seen_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

CHECK_STATUSES = [s.value for s in CheckStatus]
DISPATCH_MODES = [m.value for m in DispatchMode]

# The latest check-back of each half message that has been due at least once:
# at most one row per message, deleted by a trigger when the message leaves
# `prepared` and replaced when its next check is claimed, so the table never
# holds more rows than there are pending half messages (RocketMQ #1544).
check_requests = Table(
    "check_requests",
    metadata,
    Column(
        "message_offset",
        BigInteger,
        ForeignKey("messages.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("producer_group", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("via", Text, nullable=True),
    Column("instance_id", Text, nullable=True),
    Column("check_count", Integer, nullable=False),
    Column("no_producer_attempts", Integer, nullable=False, server_default=text("0")),
    Column("claimed_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("delivered_at", DateTime(timezone=True), nullable=True),
    Column("detail", Text, nullable=True),
    CheckConstraint(_one_of("status", CHECK_STATUSES), name="status"),
    CheckConstraint(_one_of("via", DISPATCH_MODES, nullable=True), name="via"),
    # Dispatched exactly when there was someone to ask: a live instance
    # (pull, push), or the group's check source (database, no instance).
    CheckConstraint(
        "(status = 'no_producer') = (via IS NULL) "
        "AND (instance_id IS NULL) = (via IS NULL OR via = 'database')",
        name="addressed",
    ),
    # A long poll reads the pending requests of one instance.
    Index(
        "ix_check_requests_producer_group_instance_id",
        "producer_group",
        "instance_id",
        postgresql_where=text("status = 'pending'"),
    ),
    # A producer that comes back wakes the messages that waited for it.
    Index(
        "ix_check_requests_producer_group",
        "producer_group",
        postgresql_where=text("status = 'no_producer'"),
    ),
)

CHECK_SOURCE_MODES = [m.value for m in CheckSourceMode]

# A producer group's own database, which answers its check-backs with the
# barrier's rule (core/checkback/sources.py). The URL is kept without its
# password; the password only encrypted (Fernet, with the coordinator's key).
check_sources = Table(
    "check_sources",
    metadata,
    Column("producer_group", Text, primary_key=True),
    Column("database_url", Text, nullable=False),
    Column("password_encrypted", Text, nullable=True),
    Column("barrier_table", Text, nullable=False),
    Column("mode", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("last_check_at", DateTime(timezone=True), nullable=True),
    Column("last_ok", Boolean, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    CheckConstraint(_one_of("mode", CHECK_SOURCE_MODES), name="mode"),
)

# Bearer tokens of the HTTP API (and of every later door). Only the SHA-256 of
# a token's secret is stored; the secret is shown once, when it is created.
# Each list holds shell-style patterns of the names the token may use.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("secret_sha256", Text, nullable=False, unique=True),
    Column("produce_topics", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("producer_groups", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("consume_groups", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("consume_topics", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("admin", Boolean, nullable=False, server_default=text("false")),
    Column("metrics", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
)
