"""The producers' own database: the local truth the soak's verdict is measured against.

A local transaction writes the barrier row (coordinator.client.barrier) and
one order row, keyed by the transaction id, in one database transaction:
an order row exists exactly when the local transaction committed.
Check-backs answer from the barrier, as a real producer's would.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from coordinator.client import Barrier

BARRIER = Barrier()

ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS soak_orders (
    transaction_id text PRIMARY KEY,
    message_id text NOT NULL,
    run text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


def create_tables(url: str) -> None:
    with psycopg.connect(url) as conn:
        BARRIER.create_table(conn)
        conn.execute(ORDERS_DDL)


def insert_order(conn: psycopg.Connection, transaction_id: str, message_id: str, run: str) -> None:
    conn.execute(
        "INSERT INTO soak_orders (transaction_id, message_id, run) VALUES (%s, %s, %s)",
        (transaction_id, message_id, run),
    )


def committed_message_ids(url: str, run: str) -> frozenset[str]:
    """The messages whose local transaction committed."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT message_id FROM soak_orders WHERE run = %s", (run,))
        return frozenset(row[0] for row in rows)


def committed_count(conn: psycopg.Connection, run: str) -> int:
    row = conn.execute("SELECT count(*) FROM soak_orders WHERE run = %s", (run,)).fetchone()
    return int(row[0]) if row else 0


def database_next_to(url: str, suffix: str = "soak_truth") -> str:
    """A database named after `url`'s plus `suffix`, on the same server, created if absent.

    By default the producers' own, beside the coordinator's.
    """
    name = f"{conninfo_to_dict(url).get('dbname') or 'postgres'}_{suffix}"
    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return make_conninfo(url, dbname=name)
