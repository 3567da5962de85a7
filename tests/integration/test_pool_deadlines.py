"""The pool's connections: bounded in time, closed rather than cancelled, pinned settings.

The second test also holds psycopg to what coordinator/db/connections.py
relies on (its `_try_cancel` hook): if a psycopg release changes it, this
fails, and pyproject.toml's upper bound on psycopg is why it cannot change
unnoticed.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from coordinator.db.pool import CoordinatorPool
from coordinator.db.queries import fetch_one
from coordinator.domain.errors import DatabaseUnavailable


def _backend(db: psycopg.Connection, pid: int) -> tuple[str, str] | None:
    row = db.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    return None if row is None else (row[0], row[1])


@pytest.mark.anyio
async def test_a_statement_past_the_deadline_is_answered_unavailable_and_its_connection_closed(
    database_url: str, db: psycopg.Connection
) -> None:
    pool = CoordinatorPool(database_url, min_size=1, max_size=2, timeout=3.0, deadline=1.0)
    await pool.open(wait=True)
    try:
        pid = None
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable, match=r"did not answer within 1 s"):
            async with pool.connection() as conn:
                pid = conn.info.backend_pid
                await conn.execute("SELECT pg_sleep(5)")
        took = time.monotonic() - started
        assert 0.9 < took < 3.5
        # Not cancelled: the server is still running the statement (pg_sleep
        # does not look at its socket), the client side is gone.
        assert pid is not None
        backend = _backend(db, pid)
        assert backend is not None and backend[0] == "active" and "pg_sleep" in backend[1]
        # The pool goes on with other connections.
        async with pool.connection() as conn:
            assert await fetch_one(conn, "ping") is not None
    finally:
        await pool.close()


@pytest.mark.anyio
async def test_a_cancelled_task_closes_its_connection_instead_of_cancelling_its_statement(
    database_url: str, db: psycopg.Connection
) -> None:
    """A client that goes away cancels its request's task: the statement is left alone.

    psycopg's own behaviour would send the server a cancel request, which
    turns a commit waiting for the synchronous standby into a local-only one.
    """
    pool = CoordinatorPool(database_url, min_size=1, max_size=2, timeout=3.0, deadline=30.0)
    await pool.open(wait=True)
    pids: list[int] = []

    async def request() -> None:
        async with pool.connection() as conn:
            pids.append(conn.info.backend_pid)
            await conn.execute("SELECT pg_sleep(3)")

    try:
        task = asyncio.create_task(request())
        while not pids:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)
        backend = _backend(db, pids[0])
        assert backend is not None and backend[0] == "active", backend
        assert "pg_sleep" in backend[1]
        async with pool.connection() as conn:
            assert conn.info.backend_pid != pids[0]  # the closed one was dropped
    finally:
        await pool.close()


@pytest.mark.anyio
@pytest.mark.parametrize("level", ["on", "remote_apply", "local"])
async def test_synchronous_commit_is_pinned_whatever_the_database_default(
    database_url: str, db: psycopg.Connection, level: str
) -> None:
    dbname = db.info.dbname
    db.execute(f'ALTER DATABASE "{dbname}" SET synchronous_commit = off')
    pool = CoordinatorPool(
        database_url, min_size=1, max_size=1, timeout=3.0, synchronous_commit=level
    )
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            await fetch_one(conn, "ping")
            row = await (await conn.execute("SHOW synchronous_commit")).fetchone()
            assert row is not None and row["synchronous_commit"] == level
    finally:
        await pool.close()
