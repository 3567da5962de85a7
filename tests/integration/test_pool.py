"""A commit on the core's connections costs the same however large its tables grew."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import AsyncConnection

from coordinator.core import Coordinator
from coordinator.core.configs import TransactionsConfig
from coordinator.core.ending import end_validated
from coordinator.core.producing import insert_validated
from coordinator.domain.states import Resolution
from coordinator.metrics import Meter
from tests.factories import TOPIC, end, half

pytestmark = pytest.mark.anyio

GROW = """
INSERT INTO messages (message_id, kind, topic, body, state, resolved_at, resolution_source)
SELECT 'filler-' || n, 'normal', 'filler', '\\x00'::bytea, 'committed', now(), 'client'
FROM generate_series(1, 20000) AS n;
INSERT INTO check_requests (message_offset, producer_group, status, check_count)
SELECT id, 'filler', 'no_producer', 1 FROM messages WHERE topic = 'filler';
INSERT INTO subscriptions (consumer_group, topic, expression)
SELECT 'filler-' || n, 'filler-' || n, '*' FROM generate_series(1, 2000) AS n;
"""
# Every table a prepare and commit touches, directly or by trigger.
TOUCHED = ("messages", "message_history", "check_requests", "deliveries", "subscriptions")


async def _prepare_and_commit(conn: AsyncConnection[Any], config: TransactionsConfig) -> None:
    message = half()
    [sent] = await insert_validated(conn, [message], config, transactional=True)
    assert not isinstance(sent, Exception)
    ended_by = end(sent.transaction_id or "", Resolution.COMMIT)
    [ended] = await end_validated(conn, [ended_by], Meter())
    assert not isinstance(ended, Exception)


async def _rows_read(conn: AsyncConnection[Any]) -> int:
    # pg_stat_xact_*: this backend's counts not yet flushed to the shared
    # statistics (so read it before and after). A full scan shows here
    # whether it is sequential or along an index.
    cursor = await conn.execute(
        "SELECT sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)) AS rows"
        " FROM pg_stat_xact_user_tables WHERE relname = ANY(%s)",
        [list(TOUCHED)],
    )
    row = await cursor.fetchone()
    return int(row["rows"] or 0) if row else 0


async def test_a_commit_reads_a_few_rows_after_its_tables_grew(core: Coordinator) -> None:
    # The situation that made a one-row commit take 40 ms: the statements run
    # often enough to be prepared (psycopg) and cached (Postgres, also inside
    # the delivery trigger) while `messages` is empty by its statistics, then
    # the table grows with no ANALYZE in between. The pool plans every
    # execution (database.py), so the commit still finds its row by index;
    # a session that reused the plans cached while the table was empty
    # (plan_cache_mode = force_generic_plan) reads the grown table in full.
    # The trigger's plans are generic by design (0004) and may not scan:
    # closing the check request and fanning out stay index lookups.
    async with core.pool.connection() as conn:
        await conn.execute("INSERT INTO subscriptions VALUES ('billing', %s, '*')", [TOPIC])
        for table in TOUCHED:
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
            await conn.execute(f"ANALYZE {table}")
        for _ in range(10):
            await _prepare_and_commit(conn, core.configs.transactions)
        await conn.execute(GROW)
        async with conn.transaction():
            before = await _rows_read(conn)
            await _prepare_and_commit(conn, core.configs.transactions)
            # a handful of lookups, not 20,000 rows
            assert await _rows_read(conn) - before < 20
