"""The core's connections run READ COMMITTED even where the database's default is stricter.

The compare-and-set statements (an end, a claim, an ack) are written for
READ COMMITTED: one that waited for a concurrent change of its row re-reads
the row and answers from what it finds. Under REPEATABLE READ the same
statement fails with a serialization error instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.states import Resolution
from tests.factories import end, half

pytestmark = pytest.mark.anyio

POOL_SIZE = 3
PROMPT = 10.0


@pytest.fixture
def strict_database(db: psycopg.Connection, database_url: str) -> Iterator[str]:
    """This test's database, with REPEATABLE READ as every new session's default."""
    name = db.info.dbname
    db.execute(
        psycopg.sql.SQL(
            "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'"
        ).format(psycopg.sql.Identifier(name))
    )
    with psycopg.connect(database_url) as plain:  # a connection of no one's pool
        assert _isolation(plain) == "repeatable read"
    yield database_url


def _isolation(conn: psycopg.Connection) -> str:
    (level,) = conn.execute("SHOW transaction_isolation").fetchone()  # type: ignore[misc]
    return str(level)


@contextlib.asynccontextmanager
async def _core(database_url: str) -> AsyncIterator[Coordinator]:
    settings = Settings(database_url=None, pool_min_size=POOL_SIZE, pool_max_size=POOL_SIZE)
    async with Coordinator.connect(database_url, settings, listen=True) as core:
        yield core


async def test_every_pool_connection_runs_read_committed(strict_database: str) -> None:
    async with _core(strict_database) as core, contextlib.AsyncExitStack() as held:
        # Hold them all at once, so each is a different connection.
        connections = [
            await held.enter_async_context(core.pool.connection()) for _ in range(POOL_SIZE)
        ]
        levels = []
        for conn in connections:
            autocommit = await (await conn.execute("SHOW transaction_isolation")).fetchone()
            async with conn.transaction():
                inside = await (await conn.execute("SHOW transaction_isolation")).fetchone()
            levels.append((autocommit["transaction_isolation"], inside["transaction_isolation"]))
        assert len({id(c) for c in connections}) == POOL_SIZE
        assert levels == [("read committed", "read committed")] * POOL_SIZE


async def test_an_end_racing_a_change_of_its_message_succeeds(
    strict_database: str, db: psycopg.Connection
) -> None:
    async with _core(strict_database) as core:
        sent = await core.transactions.prepare(half())
        # Another transaction changes the message's row and has not committed
        # yet (what a check-back claim does: it moves the next check time).
        with psycopg.connect(strict_database) as racer:
            racer.execute(
                "UPDATE messages SET next_check_at = now() + interval '1 minute' WHERE id = %s",
                (sent.offset,),
            )
            ending = asyncio.create_task(
                core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
            )
            await _until_waiting_for_a_lock(db, ending)
            racer.commit()
        # Under REPEATABLE READ the end fails here: "could not serialize
        # access due to concurrent update".
        result = await asyncio.wait_for(ending, PROMPT)
    assert result.state.value == "committed" and result.changed
    (state,) = db.execute("SELECT state FROM messages WHERE id = %s", (sent.offset,)).fetchone()
    assert state == "committed"


async def _until_waiting_for_a_lock(db: psycopg.Connection, task: asyncio.Task[object]) -> None:
    """Until a session of this database waits for a row lock (the end, behind the racer)."""
    deadline = asyncio.get_running_loop().time() + PROMPT
    while True:
        assert not task.done(), task
        (waiting,) = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        if waiting:
            return
        assert asyncio.get_running_loop().time() < deadline, "the end never waited for the row"
        await asyncio.sleep(0.02)
