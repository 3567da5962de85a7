"""The core's connections keep index plans when `messages` outgrows its statistics."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import AsyncConnection

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.ending import end_validated
from coordinator.core.producing import insert_validated
from coordinator.states import Resolution
from tests.factories import end, half

pytestmark = pytest.mark.anyio

GROW = """
INSERT INTO messages (message_id, kind, topic, body, state, resolved_at, resolution_source)
SELECT 'filler-' || n, 'normal', 'filler', '\\x00'::bytea, 'committed', now(), 'client'
FROM generate_series(1, 20000) AS n
"""


async def _prepare_and_commit(conn: AsyncConnection[Any], settings: Settings) -> None:
    message = half()
    [sent] = await insert_validated(conn, [message], settings, transactional=True)
    assert not isinstance(sent, Exception)
    [ended] = await end_validated(conn, [end(sent.transaction_id or "", Resolution.COMMIT)])
    assert not isinstance(ended, Exception)


async def _sequential_scans_of_messages(conn: AsyncConnection[Any]) -> int:
    # pg_stat_xact_*: this transaction's own counts, before any stats flush.
    cursor = await conn.execute(
        "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'messages'"
    )
    row = await cursor.fetchone()
    return row["seq_scan"] if row else 0


async def test_cached_plans_stay_on_indexes_after_messages_grows(core: Coordinator) -> None:
    # The situation that made a one-row commit take 40 ms: the statements run
    # often enough to be prepared and cached (generic plans, also inside the
    # delivery trigger) while `messages` is empty by its statistics, then the
    # table grows with no ANALYZE in between.
    async with core.pool.connection() as conn:
        await conn.execute("ALTER TABLE messages SET (autovacuum_enabled = off)")
        await conn.execute("ANALYZE messages")
        for _ in range(10):
            await _prepare_and_commit(conn, core.settings)
        await conn.execute(GROW)
        async with conn.transaction():
            await _prepare_and_commit(conn, core.settings)
            assert await _sequential_scans_of_messages(conn) == 0
