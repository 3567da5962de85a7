"""LISTEN/NOTIFY wakes long polls; payload filters; no lost wake-ups."""

from __future__ import annotations

import psycopg
import pytest

from coordinator.db.notifier import DELIVERIES_CHANNEL, Notifier

pytestmark = pytest.mark.anyio


async def test_a_notification_wakes_only_matching_subscribers(
    database_url: str, db: psycopg.Connection
) -> None:
    notifier = Notifier(database_url, [DELIVERIES_CHANNEL])
    await notifier.start()
    try:
        async with (
            notifier.subscribe(DELIVERIES_CHANNEL, "group-a") as a,
            notifier.subscribe(DELIVERIES_CHANNEL, "group-b") as b,
            notifier.subscribe(DELIVERIES_CHANNEL) as anyone,
        ):
            db.execute("SELECT pg_notify(%s, 'group-a')", (DELIVERIES_CHANNEL,))
            assert await a.wait(timeout=5) is True
            assert await anyone.wait(timeout=5) is True
            assert await b.wait(timeout=0.3) is False
    finally:
        await notifier.stop()


async def test_a_notification_before_the_wait_is_not_lost(
    database_url: str, db: psycopg.Connection
) -> None:
    notifier = Notifier(database_url, [DELIVERIES_CHANNEL])
    await notifier.start()
    try:
        async with notifier.subscribe(DELIVERIES_CHANNEL) as subscription:
            db.execute("SELECT pg_notify(%s, 'x')", (DELIVERIES_CHANNEL,))
            # the waiter only now gets to wait; the notification is remembered
            assert await subscription.wait(timeout=5) is True
            assert await subscription.wait(timeout=0.2) is False  # re-armed
    finally:
        await notifier.stop()


async def test_an_uncommitted_notify_wakes_nobody(database_url: str) -> None:
    notifier = Notifier(database_url, [DELIVERIES_CHANNEL])
    await notifier.start()
    try:
        async with notifier.subscribe(DELIVERIES_CHANNEL) as subscription:
            with psycopg.connect(database_url) as conn:
                conn.execute("SELECT pg_notify(%s, 'x')", (DELIVERIES_CHANNEL,))
                conn.rollback()
            assert await subscription.wait(timeout=0.5) is False
    finally:
        await notifier.stop()


async def test_subscribing_to_an_unknown_channel_is_an_error(database_url: str) -> None:
    notifier = Notifier(database_url, [DELIVERIES_CHANNEL])
    with pytest.raises(ValueError, match="not listening"):
        async with notifier.subscribe("elsewhere"):
            pass
