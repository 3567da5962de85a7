"""Migrations 0003 (delivery tables, fan-out trigger, lag view) and 0004 (statement
triggers in place of foreign keys): each installs and removes what it says."""

from __future__ import annotations

import psycopg

from coordinator.db import migrate

DELIVERY_TABLES = {"subscriptions", "deliveries", "dead_letters", "consumer_lag"}


def _tables(db: psycopg.Connection) -> set[str]:
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema IN ('public', 'coordinator')"
    ).fetchall()
    return {name for (name,) in rows}


def _triggers(db: psycopg.Connection) -> set[str]:
    rows = db.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'messages'::regclass AND NOT tgisinternal"
    ).fetchall()
    return {name for (name,) in rows}


FAN_OUT_0003 = {"messages_deliver_inserted", "messages_deliver_updated"}
TRIGGERS_0004 = {"messages_changed_inserted", "messages_changed_updated", "messages_deleted"}


def _foreign_keys(db: psycopg.Connection) -> set[str]:
    rows = db.execute("SELECT conname FROM pg_constraint WHERE contype = 'f'").fetchall()
    return {name for (name,) in rows}


def test_downgrade_below_0004_brings_back_foreign_keys_and_the_old_triggers(
    database_url: str, db: psycopg.Connection
) -> None:
    hot_path_keys = {
        "fk_message_history_message_offset_messages",
        "fk_deliveries_message_offset_messages",
        "fk_deliveries_consumer_group_subscriptions",
    }
    assert _triggers(db) >= TRIGGERS_0004 and not _triggers(db) & FAN_OUT_0003
    assert not hot_path_keys & _foreign_keys(db)
    # A history row whose message is gone would break the foreign key.
    db.execute(
        "INSERT INTO message_history (message_offset, source, to_state) "
        "VALUES (424242, 'client', 'committed')"
    )

    migrate.downgrade(database_url, "0003")
    assert _triggers(db) >= FAN_OUT_0003 and not _triggers(db) & TRIGGERS_0004
    assert hot_path_keys <= _foreign_keys(db)
    assert db.execute(
        "SELECT count(*) FROM message_history WHERE message_offset = 424242"
    ).fetchone() == (0,)
    assert db.execute(
        "SELECT count(*) FROM pg_proc WHERE proname IN "
        "('messages_changed', 'messages_deleted', 'subscriptions_deleted')"
    ).fetchone() == (0,)

    migrate.upgrade(database_url)
    assert _triggers(db) >= TRIGGERS_0004 and not hot_path_keys & _foreign_keys(db)


def test_downgrade_below_0003_removes_delivery_and_upgrade_restores_it(
    database_url: str, db: psycopg.Connection
) -> None:
    assert _tables(db) >= DELIVERY_TABLES
    assert _triggers(db) >= TRIGGERS_0004
    options = db.execute("SELECT reloptions FROM pg_class WHERE relname = 'deliveries'").fetchone()[
        0
    ]
    assert "fillfactor=70" in options and "autovacuum_vacuum_scale_factor=0.01" in options

    migrate.downgrade(database_url, "0002")
    assert not DELIVERY_TABLES & _tables(db)
    assert not (FAN_OUT_0003 | TRIGGERS_0004) & _triggers(db)
    assert db.execute(
        "SELECT count(*) FROM pg_proc "
        "WHERE proname IN ('deliver_committed_messages', 'messages_changed')"
    ).fetchone() == (0,)
    # messages still commit without the trigger
    db.execute(
        "INSERT INTO messages (message_id, kind, topic, body, state, resolved_at) "
        "VALUES ('M1', 'normal', 'orders', 'x', 'committed', now())"
    )

    migrate.upgrade(database_url)
    assert _tables(db) >= DELIVERY_TABLES
    assert _triggers(db) >= TRIGGERS_0004
