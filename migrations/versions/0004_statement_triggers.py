"""Hot-path integrity by statement-level triggers instead of row-level foreign keys.

A batch commit of 200 messages used to fire 200 foreign-key checks on
`message_history`, 200 row triggers closing check requests, and two
foreign-key checks per delivery row; each check is a query planned anew
(the pool plans every statement with its parameters). Together they were
more than half of what Postgres spent on a commit. Now:

- `messages_changed()` runs once per INSERT or UPDATE statement on
  `messages`: it fans newly committed messages out to deliveries (as in
  0003) and closes the check requests of messages that left `prepared`
  (0002's row trigger). It reads only the statement's transition tables and
  index lookups, so its plans are cached (generic) and never scan a table.
- The foreign keys from `message_history` and `deliveries` to `messages`,
  and from `deliveries` to `subscriptions`, are gone. Those rows are only
  written by the statement (or trigger) that reads the row they point to;
  deleting a message or a subscription still removes its dependents, by an
  AFTER DELETE statement trigger in place of ON DELETE CASCADE. The fan-out
  takes a key-share lock on the subscriptions it reads (once per statement,
  where the foreign key took one per delivery), so an unsubscribe waits for
  a commit that is fanning out to it and then removes what it fanned out.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from coordinator.db.migration_sql import execute_block

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DROPPED_FOREIGN_KEYS = [
    ("message_history", "fk_message_history_message_offset_messages"),
    ("deliveries", "fk_deliveries_message_offset_messages"),
    ("deliveries", "fk_deliveries_consumer_group_subscriptions"),
]


def upgrade() -> None:
    for table, name in DROPPED_FOREIGN_KEYS:
        op.drop_constraint(name, table, type_="foreignkey")

    # The statement-level triggers and their functions, in place of 0002's
    # and 0003's (0004_statement_triggers.sql).
    execute_block(__file__, "upgrade")


def downgrade() -> None:
    # Back to the triggers of 0002 and 0003, without the rows the foreign keys
    # restored below would refuse.
    execute_block(__file__, "downgrade")
    op.create_foreign_key(
        "fk_message_history_message_offset_messages",
        "message_history",
        "messages",
        ["message_offset"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        "fk_deliveries_message_offset_messages",
        "deliveries",
        "messages",
        ["message_offset"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_foreign_key(
        "fk_deliveries_consumer_group_subscriptions",
        "deliveries",
        "subscriptions",
        ["consumer_group", "topic"],
        ["consumer_group", "topic"],
        ondelete="CASCADE",
    )
