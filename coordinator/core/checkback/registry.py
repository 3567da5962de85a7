"""The producer registry: instances of each producer group and whether they are live."""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext
from coordinator.db.queries import execute, fetch_all, fetch_one
from coordinator.domain.check_urls import check_url
from coordinator.domain.checkback import Producer
from coordinator.domain.records import record_from_row
from coordinator.domain.rules import check_instance, check_name


def _producer(row: dict[str, Any]) -> Producer:
    return record_from_row(Producer, row)


async def heartbeat(
    conn: AsyncConnection[Any],
    config: CheckBackConfig,
    producer_group: str,
    instance_id: str,
    url: str | None,
    *,
    keep_check_url: bool = False,
) -> Producer:
    check_instance(producer_group, instance_id)
    row = await fetch_one(
        conn,
        "heartbeat_producer",
        {
            "producer_group": producer_group,
            "instance_id": instance_id,
            "check_url": check_url(url),
            "keep_check_url": keep_check_url,
            "producer_ttl_seconds": config.producer_ttl_seconds,
        },
    )
    assert row is not None  # an upsert always returns its row
    return _producer(row)


async def remove(conn: AsyncConnection[Any], producer_group: str, instance_id: str) -> bool:
    check_instance(producer_group, instance_id)
    row = await fetch_one(
        conn, "remove_producer", {"producer_group": producer_group, "instance_id": instance_id}
    )
    return row is not None


async def list_producers(
    conn: AsyncConnection[Any], config: CheckBackConfig, producer_group: str | None = None
) -> list[Producer]:
    if producer_group is not None:
        check_name("producer group", producer_group)
    rows = await fetch_all(
        conn,
        "list_producers",
        {
            "producer_group": producer_group,
            "producer_ttl_seconds": config.producer_ttl_seconds,
        },
    )
    return [_producer(row) for row in rows]


async def forget_stale(conn: AsyncConnection[Any], config: CheckBackConfig) -> None:
    # Never forget an instance that still counts as live.
    forget_after = max(config.producer_forget_seconds, config.producer_ttl_seconds)
    await execute(conn, "forget_producers", {"producer_forget_seconds": forget_after})


class ProducerRegistry:
    """The instances of each producer group: heard from, left, listed."""

    def __init__(self, context: CoreContext, config: CheckBackConfig) -> None:
        self._context = context
        self._config = config

    async def heartbeat(
        self, producer_group: str, instance_id: str, check_url: str | None = None
    ) -> Producer:
        """Register an instance or record that it is alive (with its check URL, if push)."""
        async with self._context.pool.connection() as conn:
            return await heartbeat(conn, self._config, producer_group, instance_id, check_url)

    async def leave(self, producer_group: str, instance_id: str) -> bool:
        """Remove an instance at clean shutdown; False if it was not registered."""
        async with self._context.pool.connection() as conn:
            return await remove(conn, producer_group, instance_id)

    async def instances(self, producer_group: str | None = None) -> list[Producer]:
        """The registered instances (of one group, or of all), live or not."""
        async with self._context.pool.connection() as conn:
            return await list_producers(conn, self._config, producer_group)
