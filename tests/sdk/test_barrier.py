"""The barrier helper decides check-backs from the producer's own database."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from sqlalchemy import create_engine, text

from coordinator.client import (
    AsyncBarrierTransactionListener,
    Barrier,
    BarrierTransactionListener,
    LocalTransactionState,
    Message,
)
from coordinator.db.urls import sqlalchemy_url

COMMIT, ROLLBACK, UNKNOWN = (
    LocalTransactionState.COMMIT,
    LocalTransactionState.ROLLBACK,
    LocalTransactionState.UNKNOWN,
)


@pytest.fixture
def barrier(db: psycopg.Connection) -> Barrier:
    barrier = Barrier()
    barrier.create_table(db)
    db.execute("CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL)")
    return barrier


def _check(database_url: str, barrier: Barrier, transaction_id: str) -> LocalTransactionState:
    with psycopg.connect(database_url) as conn:
        return barrier.check(conn, transaction_id)  # commits on leaving the block


def test_a_committed_local_transaction_answers_commit(database_url: str, barrier: Barrier) -> None:
    with psycopg.connect(database_url) as conn:
        barrier.mark_committed(conn, "tx-1")
        conn.execute("INSERT INTO orders VALUES ('o1', 'tx-1')")
    assert _check(database_url, barrier, "tx-1") is COMMIT
    assert _check(database_url, barrier, "tx-1") is COMMIT  # repeated checks agree


def test_a_rolled_back_or_missing_local_transaction_answers_rollback_and_stays_dead(
    database_url: str, barrier: Barrier, db: psycopg.Connection
) -> None:
    with psycopg.connect(database_url) as conn:
        barrier.mark_committed(conn, "tx-2")
        conn.rollback()
    assert _check(database_url, barrier, "tx-2") is ROLLBACK
    assert _check(database_url, barrier, "never-ran") is ROLLBACK

    # a late local transaction can no longer commit
    with psycopg.connect(database_url) as conn, pytest.raises(psycopg.errors.UniqueViolation):
        barrier.mark_committed(conn, "never-ran")
    assert db.execute(
        "SELECT outcome FROM coordinator_barrier WHERE transaction_id = 'never-ran'"
    ).fetchone() == ("rolled_back",)


@pytest.mark.parametrize(("ending", "expected"), [("commit", COMMIT), ("rollback", ROLLBACK)])
def test_a_check_during_a_running_local_transaction_waits_for_its_outcome(
    database_url: str, barrier: Barrier, ending: str, expected: LocalTransactionState
) -> None:
    local = psycopg.connect(database_url)
    barrier.mark_committed(local, "tx-running")
    answers: list[LocalTransactionState] = []
    checker = threading.Thread(
        target=lambda: answers.append(_check(database_url, barrier, "tx-running"))
    )
    checker.start()
    time.sleep(0.5)
    assert answers == []  # blocked on the key while the local transaction runs
    getattr(local, ending)()
    checker.join(timeout=10)
    local.close()
    assert answers == [expected]


def test_the_ready_made_listener_over_sqlalchemy(
    database_url: str, barrier: Barrier, db: psycopg.Connection
) -> None:
    engine = create_engine(sqlalchemy_url(database_url))

    def place_order(conn, msg: Message, arg: str) -> None:
        conn.execute(
            text("INSERT INTO orders VALUES (:id, :tid)"), {"id": arg, "tid": msg.transaction_id}
        )
        if arg == "fail":
            raise RuntimeError("business rule says no")

    listener = BarrierTransactionListener(engine, place_order)
    ok, bad = (
        Message("orders", b"o", transaction_id="tx-ok"),
        Message("orders", b"o", transaction_id="tx-bad"),
    )
    assert listener.execute_local_transaction(ok, "o-ok") is COMMIT
    assert listener.execute_local_transaction(bad, "fail") is ROLLBACK
    assert listener.check_local_transaction(ok) is COMMIT
    assert listener.check_local_transaction(bad) is ROLLBACK
    assert (
        listener.check_local_transaction(Message("orders", b"o", transaction_id="tx-none"))
        is ROLLBACK
    )
    assert db.execute("SELECT id FROM orders").fetchall() == [("o-ok",)]
    engine.dispose()


@pytest.mark.anyio
async def test_the_async_listener_over_psycopg(
    database_url: str, barrier: Barrier, db: psycopg.Connection
) -> None:
    async def place_order(conn, msg: Message, arg: str) -> None:
        await conn.execute("INSERT INTO orders VALUES (%s, %s)", (arg, msg.transaction_id))

    listener = AsyncBarrierTransactionListener(database_url, place_order)
    msg = Message("orders", b"o", transaction_id="tx-async")
    assert await listener.execute_local_transaction(msg, "o-async") is COMMIT
    assert await listener.check_local_transaction(msg) is COMMIT
    late = Message("orders", b"o", transaction_id="tx-late")
    assert await listener.check_local_transaction(late) is ROLLBACK
    assert await listener.execute_local_transaction(late, "o-late") is ROLLBACK  # fails on the key
    assert db.execute("SELECT id FROM orders").fetchall() == [("o-async",)]


def test_table_names_must_be_plain_identifiers() -> None:
    with pytest.raises(ValueError, match="identifier"):
        Barrier("orders; DROP TABLE x")
