"""Waking a consumer group's waiting receives."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.db.queries import fetch_one


async def notify_consumer_group(conn: AsyncConnection[Any], consumer_group: str) -> None:
    # Part of the caller's transaction: receivers wake once it commits.
    await fetch_one(conn, "notify_consumer_group", {"consumer_group": consumer_group})
