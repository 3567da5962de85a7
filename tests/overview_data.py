"""A coordinator with something to show: the data of the overview's tests.

Through the core, as clients would make it: committed and rolled back
transactions, a discarded and an expired one (by a real check-back round),
pending half messages of several ages in two producer groups (their birth
moved back in the database), check-backs handed to a live producer, a
consumer group with lag, a message in flight and a dead letter.

The tests compare what they are shown with the database itself
(`expected_figures`, plain SQL of its own, not the overview's queries).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.messages import NewMessage
from coordinator.domain.overview import AGE_BOUNDS_SECONDS
from coordinator.domain.states import Resolution
from tests.factories import end

ORDERS = "orders"
PAYMENTS = "payments"
ORDER_SVC = "order-svc"
PAYMENT_SVC = "payment-svc"
BILLING = "billing"
INSTANCE = "10.0.0.7@4242"
# Ages of the pending half messages of order-svc: one in each age bucket.
PENDING_AGES = (
    timedelta(seconds=2),
    timedelta(seconds=30),
    timedelta(minutes=3),
    timedelta(minutes=20),
    timedelta(hours=1),
    timedelta(hours=3),
)


def overview_settings(**overrides: Any) -> Settings:
    """No scheduler (rounds are run by hand), a budget of two checks."""
    values: dict[str, Any] = {
        "database_url": None,
        "check_scheduler_enabled": False,
        "check_max": 2,
    }
    values.update(overrides)
    return Settings(**values)


@dataclass(frozen=True)
class Seeded:
    oldest_transaction_id: str  # the 3-hour-old half message


def _half(group: str, topic: str, number: int) -> NewMessage:
    return NewMessage(
        topic=topic, producer_group=group, tags="created", body=f"{topic} {number}".encode()
    )


async def seed(core: Coordinator, db: psycopg.Connection) -> Seeded:
    """Fill an empty database (see the module's docstring); `db` is in autocommit."""
    await core.delivery.subscribe(BILLING, ORDERS)
    await core.checkback.producers.heartbeat(ORDER_SVC, INSTANCE)

    # Resolved by their producers: 3 commits (delivered to billing), 1 rollback.
    for number in range(4):
        sent = await core.transactions.prepare(_half(ORDER_SVC, ORDERS, number))
        resolution = Resolution.ROLLBACK if number == 3 else Resolution.COMMIT
        await core.transactions.end(end(sent.transaction_id, resolution, group=ORDER_SVC))

    # billing receives two of its three: one stays in flight, one is dead-lettered.
    received = await core.delivery.receive(BILLING, max_messages=2, invisible_seconds=300)
    await core.delivery.dead_letter(BILLING, received[1].receipt_handle)

    # One discarded (check budget used up) and one expired (past retention),
    # by a real check-back round.
    discard = await core.transactions.prepare(_half(ORDER_SVC, ORDERS, 10))
    expire = await core.transactions.prepare(_half(ORDER_SVC, ORDERS, 11))
    db.execute(
        "UPDATE messages SET check_count = %s, next_check_at = now() WHERE id = %s",
        (core.configs.checkback.check_max, discard.offset),
    )
    db.execute(
        "UPDATE messages SET born_at = now() - %s, next_check_at = now() WHERE id = %s",
        (timedelta(hours=core.configs.checkback.retention_hours + 1), expire.offset),
    )

    # Pending half messages of order-svc, one per age bucket; the two oldest
    # are due and get checked back (handed to the live instance).
    pending = []
    for number, age in enumerate(PENDING_AGES):
        sent = await core.transactions.prepare(_half(ORDER_SVC, ORDERS, 20 + number))
        db.execute(
            "UPDATE messages SET born_at = now() - %s, next_check_at = now() + interval '1 hour' "
            "WHERE id = %s",
            (age, sent.offset),
        )
        pending.append(sent)
    db.execute(
        "UPDATE messages SET next_check_at = now() WHERE id = ANY(%s)",
        ([pending[-1].offset, pending[-2].offset],),
    )
    # payment-svc has no live instance: its due message waits for one.
    for number in range(2):
        sent = await core.transactions.prepare(_half(PAYMENT_SVC, PAYMENTS, 30 + number))
        if number == 0:
            db.execute(
                "UPDATE messages SET born_at = now() - interval '90 seconds', "
                "next_check_at = now() WHERE id = %s",
                (sent.offset,),
            )
    await core.checkback.rounds.run_round()
    await core.checkback.pull.poll(ORDER_SVC, INSTANCE, wait_seconds=0, max_requests=10)
    return Seeded(oldest_transaction_id=pending[-1].transaction_id)


def expected_figures(db: psycopg.Connection) -> dict[str, Any]:
    """What the overview must show, read from the tables with SQL of the test's own."""
    bounds = [0.0, *AGE_BOUNDS_SECONDS]
    ages = [
        row[0]
        for row in db.execute(
            "SELECT extract(epoch FROM now() - born_at)::float8 FROM messages "
            "WHERE state = 'prepared'"
        )
    ]
    buckets = [sum(1 for age in ages if age >= low) for low in bounds]
    by_bucket = [buckets[i] - (buckets[i + 1] if i + 1 < len(buckets) else 0) for i in range(6)]
    states = dict(
        db.execute(
            "SELECT state, count(*) FROM messages "
            "WHERE kind = 'transactional' AND state <> 'prepared' GROUP BY state"
        ).fetchall()
    )
    pending_by_group = dict(
        db.execute(
            "SELECT producer_group, count(*) FROM messages WHERE state = 'prepared' "
            "GROUP BY producer_group"
        ).fetchall()
    )
    oldest = db.execute(
        "SELECT transaction_id, check_count FROM messages WHERE state = 'prepared' "
        "ORDER BY born_at LIMIT 1"
    ).fetchone()
    lag, in_flight = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE receipt_handle IS NOT NULL "
        "AND visible_at > now()) FROM deliveries WHERE consumer_group = %s",
        (BILLING,),
    ).fetchone()
    (dead,) = db.execute(
        "SELECT count(*) FROM dead_letters WHERE consumer_group = %s", (BILLING,)
    ).fetchone()
    live = dict(
        db.execute(
            "SELECT producer_group, count(*) FROM producers "
            "WHERE last_seen_at > now() - interval '30 seconds' GROUP BY producer_group"
        ).fetchall()
    )
    check_statuses = dict(
        db.execute("SELECT status, count(*) FROM check_requests GROUP BY status").fetchall()
    )
    return {
        "pending": len(ages),
        "by_bucket": by_bucket,
        "committed": states.get("committed", 0),
        "rolled_back": states.get("rolled_back", 0),
        "discarded": states.get("discarded", 0),
        "expired": states.get("expired", 0),
        "pending_by_group": pending_by_group,
        "oldest_transaction_id": oldest[0],
        "oldest_check_count": oldest[1],
        "lag": lag,
        "in_flight": in_flight,
        "dead_letters": dead,
        "live": live,
        "check_statuses": check_statuses,
    }


# A node with these settings finds work for its retention round in the seeded
# data once `age_for_retention` ran: the dead letter goes, billing is idle.
RETENTION_OVERRIDES: dict[str, Any] = {
    "dead_letter_retention_hours": 1.0,
    "idle_consumer_group_hours": 1.0,
}
STORED_TABLES = ("messages", "message_history", "deliveries", "dead_letters")


def age_for_retention(db: psycopg.Connection) -> None:
    """The seeded dead letter died two hours ago; billing subscribed then and (as far as
    the database knows) never received since. Tables analyzed: their estimates are exact."""
    db.execute("UPDATE dead_letters SET dead_at = now() - interval '2 hours'")
    db.execute(
        "UPDATE subscriptions SET created_at = now() - interval '2 hours', last_received_at = NULL"
    )
    for table in STORED_TABLES:
        db.execute(f"ANALYZE {table}")


def expected_storage(db: psycopg.Connection) -> dict[str, Any]:
    """Each table's bytes, rows and oldest row's age, and billing's pending deliveries, read
    with SQL of the test's own."""
    tables: dict[str, dict[str, Any]] = {}
    # The oldest row kept is the first one written (rows are written in time order;
    # the seed moves some births back, which the first row's is not).
    for table, born, first in (
        ("messages", "born_at", "id"),
        ("message_history", "at", "id"),
        ("deliveries", "committed_at", "id"),
        ("dead_letters", "dead_at", "dead_at"),
    ):
        size, rows = db.execute(
            f"SELECT pg_total_relation_size(%s::regclass), (SELECT count(*) FROM {table})",
            (table,),
        ).fetchone()
        row = db.execute(
            f"SELECT extract(epoch FROM now() - {born})::float8 FROM {table} "
            f"ORDER BY {first} LIMIT 1"
        ).fetchone()
        oldest = row[0] if row else None
        tables[table] = {"bytes": size, "rows": rows, "oldest_age_seconds": oldest}
    (pending,) = db.execute(
        "SELECT count(*) FROM deliveries WHERE consumer_group = %s", (BILLING,)
    ).fetchone()
    return {"tables": tables, "billing_pending": pending}
