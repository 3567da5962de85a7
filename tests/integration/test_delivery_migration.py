"""Migration 0003 installs the fan-out trigger, the tables and the lag view, and removes them."""

from __future__ import annotations

import psycopg

from coordinator.db import migrate

DELIVERY_TABLES = {"subscriptions", "deliveries", "dead_letters", "consumer_lag"}


def _tables(db: psycopg.Connection) -> set[str]:
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    ).fetchall()
    return {name for (name,) in rows}


def _triggers(db: psycopg.Connection) -> set[str]:
    rows = db.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'messages'::regclass AND NOT tgisinternal"
    ).fetchall()
    return {name for (name,) in rows}


def test_downgrade_below_0003_removes_delivery_and_upgrade_restores_it(
    database_url: str, db: psycopg.Connection
) -> None:
    assert _tables(db) >= DELIVERY_TABLES
    assert {"messages_deliver_inserted", "messages_deliver_updated"} <= _triggers(db)
    options = db.execute("SELECT reloptions FROM pg_class WHERE relname = 'deliveries'").fetchone()[
        0
    ]
    assert "fillfactor=70" in options and "autovacuum_vacuum_scale_factor=0.01" in options

    migrate.downgrade(database_url, "0002")
    assert not DELIVERY_TABLES & _tables(db)
    assert not {"messages_deliver_inserted", "messages_deliver_updated"} & _triggers(db)
    assert db.execute(
        "SELECT count(*) FROM pg_proc WHERE proname = 'deliver_committed_messages'"
    ).fetchone() == (0,)
    # messages still commit without the trigger
    db.execute(
        "INSERT INTO messages (message_id, kind, topic, body, state, resolved_at) "
        "VALUES ('M1', 'normal', 'orders', 'x', 'committed', now())"
    )

    migrate.upgrade(database_url)
    assert _tables(db) >= DELIVERY_TABLES
    assert {"messages_deliver_inserted", "messages_deliver_updated"} <= _triggers(db)
