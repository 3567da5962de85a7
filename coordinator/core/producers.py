"""The producer registry: instances of each producer group and whether they are live."""

from __future__ import annotations

import re
from typing import Any

import httpx
from psycopg import AsyncConnection

from coordinator.checkback_models import Producer
from coordinator.config import Settings
from coordinator.core.database import fetch_all, fetch_one
from coordinator.db.queries import query
from coordinator.errors import InvalidMessage
from coordinator.validation import check_name

# RocketMQ instance names look like `192.168.0.7@12345`; allow that and ids.
_INSTANCE_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
CHECK_URL_MAX_LENGTH = 2048


def check_instance(producer_group: str, instance_id: str) -> None:
    check_name("producer group", producer_group)
    if not _INSTANCE_ID.match(instance_id):
        raise InvalidMessage(
            f"instance id {instance_id[:40]!r} is not valid; use 1 to 128 letters, digits, "
            "'_', '.', ':', '@' or '-'"
        )


def check_url(url: str | None) -> str | None:
    if url is None:
        return None
    if len(url) > CHECK_URL_MAX_LENGTH:
        raise InvalidMessage(f"check URL is longer than {CHECK_URL_MAX_LENGTH} characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise InvalidMessage(f"check URL {url[:80]!r} is not a URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidMessage(f"check URL {url[:80]!r} must be an absolute http or https URL")
    return url


def _producer(row: dict[str, Any]) -> Producer:
    return Producer(
        producer_group=row["producer_group"],
        instance_id=row["instance_id"],
        check_url=row["check_url"],
        registered_at=row["registered_at"],
        last_seen_at=row["last_seen_at"],
        live=row["live"],
    )


async def heartbeat(
    conn: AsyncConnection[Any],
    settings: Settings,
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
            "producer_ttl_seconds": settings.producer_ttl_seconds,
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
    conn: AsyncConnection[Any], settings: Settings, producer_group: str | None = None
) -> list[Producer]:
    if producer_group is not None:
        check_name("producer group", producer_group)
    rows = await fetch_all(
        conn,
        "list_producers",
        {
            "producer_group": producer_group,
            "producer_ttl_seconds": settings.producer_ttl_seconds,
        },
    )
    return [_producer(row) for row in rows]


async def forget_stale(conn: AsyncConnection[Any], settings: Settings) -> None:
    # Never forget an instance that still counts as live.
    forget_after = max(settings.producer_forget_seconds, settings.producer_ttl_seconds)
    await conn.execute(query("forget_producers"), {"producer_forget_seconds": forget_after})
