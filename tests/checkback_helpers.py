"""Shared by the check-back tests: reading what the database holds, making messages due."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg

from coordinator.config import Settings
from coordinator.core.checkback import CheckBack
from coordinator.domain.checkback import CheckRequest, RoundResult

T = TypeVar("T")

INSTANCE = "producer-a"


def check_settings(**overrides: Any) -> Settings:
    """Short intervals so the tests see check-backs happen."""
    values: dict[str, Any] = {
        "database_url": None,
        "transaction_timeout_seconds": 0.2,
        "check_interval_seconds": 0.3,
        "check_max": 3,
        "check_poll_fallback_seconds": 0.1,
        "check_scheduler_enabled": False,
    }
    values.update(overrides)
    return Settings(**values)


def make_due(db: psycopg.Connection, *offsets: int) -> None:
    """Skip the wait: the messages' next check is now."""
    db.execute("UPDATE messages SET next_check_at = now() WHERE id = ANY(%s)", (list(offsets),))


def message(db: psycopg.Connection, offset: int) -> dict[str, Any]:
    cursor = db.execute(
        "SELECT state, check_count, next_check_at, resolved_at, resolution_source, born_at "
        "FROM messages WHERE id = %s",
        (offset,),
    )
    names = [c.name for c in cursor.description]
    return dict(zip(names, cursor.fetchone(), strict=True))


def check_request(db: psycopg.Connection, offset: int) -> dict[str, Any] | None:
    cursor = db.execute("SELECT * FROM check_requests WHERE message_offset = %s", (offset,))
    row = cursor.fetchone()
    if row is None:
        return None
    return dict(zip([c.name for c in cursor.description], row, strict=True))


def history(db: psycopg.Connection, offset: int) -> list[tuple]:
    return db.execute(
        "SELECT source, from_state, to_state, detail FROM message_history "
        "WHERE message_offset = %s ORDER BY id",
        (offset,),
    ).fetchall()


async def eventually(
    probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout: float = 20.0
) -> T:
    """Call probe until done(result); a generous deadline, never a speed assertion."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if done(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout} s: {result!r}")
        await asyncio.sleep(0.05)


async def settled_round(checkback: CheckBack) -> RoundResult:
    """A round, and the answers to the pushes it started (a round itself does not wait)."""
    result = await checkback.rounds.run_round()
    await checkback.rounds.settle()
    return result


def pushed_check_request() -> CheckRequest:
    """A check request as a push carries it, for tests that need one but no database."""
    return CheckRequest(
        offset=7,
        message_id="M",
        transaction_id="T",
        producer_group="g",
        check_count=1,
        topic="orders",
        tags=None,
        keys=(),
        properties={},
        body=b"hi",
        message_group=None,
        born_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
