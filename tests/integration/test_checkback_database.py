"""Database check-backs: a producer group's own database answers its checks (barrier rule).

Each producer database is a database of its own on the tests' PostgreSQL,
reached over loopback TCP (tests/producer_database.py). No producer process
runs in any of these tests unless one is registered on purpose.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.states import CheckStatus, DispatchMode
from tests.checkback_helpers import (
    INSTANCE,
    check_request,
    check_settings,
    eventually,
    make_due,
    message,
)
from tests.factories import GROUP, half
from tests.producer_database import (
    LoopbackProxy,
    ProducerDatabase,
    closed_port,
    producer_database,
    silent_port,
    socket_path,
)

pytestmark = pytest.mark.anyio

KEY = "a test passphrase for check sources"
OTHER = "billing-producers"


@pytest.fixture
def settings() -> Settings:
    return check_settings(check_source_key=KEY, check_push_timeout_seconds=2.0, check_max=5)


@pytest.fixture
def proxy(postgresql: psycopg.Connection) -> Iterator[LoopbackProxy]:
    with LoopbackProxy(socket_path(postgresql)) as running:
        yield running


@pytest.fixture
def producer_db(postgresql: psycopg.Connection) -> Iterator[ProducerDatabase]:
    with producer_database(postgresql) as created:
        yield created


async def _prepared(core: Coordinator, count: int, group: str = GROUP) -> list:
    return [await core.transactions.prepare(half(producer_group=group)) for _ in range(count)]


async def _state(db: psycopg.Connection, offset: int) -> str:
    return message(db, offset)["state"]


async def _round(core: Coordinator, db: psycopg.Connection, *offsets: int) -> None:
    make_due(db, *offsets)
    await core.checkback.rounds.run_round()
    await core.checkback.rounds.settle()


async def test_the_barrier_decides_every_check_with_no_producer_alive(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
) -> None:
    # The checking role has only what the docs list: CONNECT, USAGE, INSERT and SELECT.
    role = f"checker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(producer_db.direct_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT CONNECT ON DATABASE {producer_db.name} TO {role}")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(f"GRANT INSERT, SELECT ON coordinator_barrier TO {role}")
    try:
        sent = await _prepared(core, 4)
        committed = [s.transaction_id for s in sent[:2]]
        producer_db.mark_committed(*committed)
        await core.check_sources.set(GROUP, producer_db.tcp_url(proxy.port, user=role))

        await _round(core, db, *(s.offset for s in sent))

        for each in sent:
            expected = "committed" if each.transaction_id in committed else "rolled_back"
            state = message(db, each.offset)
            assert (state["state"], state["resolution_source"]) == (expected, "check")
            assert producer_db.outcome(each.transaction_id) == (
                "committed" if expected == "committed" else "rolled_back"
            )
        source = await core.check_sources.get(GROUP)
        assert source.last_ok is True and source.last_error is None
    finally:
        with psycopg.connect(producer_db.direct_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")


async def test_fallback_leaves_live_producers_to_answer_and_only_does_not(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)  # a live pulling instance
    (sent,) = await _prepared(core, 1)
    await core.check_sources.set(GROUP, producer_db.tcp_url(proxy.port), mode="fallback")
    await _round(core, db, sent.offset)
    request = check_request(db, sent.offset)
    assert request is not None
    assert (request["via"], request["instance_id"]) == (DispatchMode.PULL.value, INSTANCE)
    assert message(db, sent.offset)["state"] == "prepared"
    assert producer_db.outcome(sent.transaction_id) is None  # the database was not asked

    await core.check_sources.set(GROUP, producer_db.tcp_url(proxy.port), mode="only")
    await _round(core, db, sent.offset)
    assert message(db, sent.offset)["state"] == "rolled_back"
    assert producer_db.outcome(sent.transaction_id) == "rolled_back"


@pytest.mark.parametrize("local_outcome", ["commit", "rollback"])
async def test_a_local_transaction_still_running_is_waited_for(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
    local_outcome: str,
) -> None:
    (sent,) = await _prepared(core, 1)
    await core.check_sources.set(GROUP, producer_db.tcp_url(proxy.port))
    local = await psycopg.AsyncConnection.connect(producer_db.direct_url)
    try:
        await local.execute(
            "INSERT INTO coordinator_barrier (transaction_id, outcome) VALUES (%s, 'committed')",
            (sent.transaction_id,),
        )
        make_due(db, sent.offset)
        await core.checkback.rounds.run_round()
        # the check's marker insert now waits on the key the local transaction holds
        await asyncio.sleep(0.3)
        assert message(db, sent.offset)["state"] == "prepared"
        await (local.commit() if local_outcome == "commit" else local.rollback())
        await core.checkback.rounds.settle()
    finally:
        await local.close()
    expected = "committed" if local_outcome == "commit" else "rolled_back"
    assert message(db, sent.offset)["state"] == expected
    assert producer_db.outcome(sent.transaction_id) == expected


async def test_a_late_local_commit_fails_on_the_marker(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
) -> None:
    (sent,) = await _prepared(core, 1)
    await core.check_sources.set(GROUP, producer_db.tcp_url(proxy.port))
    await _round(core, db, sent.offset)
    assert message(db, sent.offset)["state"] == "rolled_back"
    with pytest.raises(psycopg.errors.UniqueViolation):
        producer_db.mark_committed(sent.transaction_id)  # the producer wakes up too late
    assert producer_db.outcome(sent.transaction_id) == "rolled_back"


@pytest.mark.parametrize("dead", ["nothing listening", "never answers"])
async def test_a_dead_database_counts_a_check_with_backoff_and_holds_up_no_other_group(
    database_url: str,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
    dead: str,
) -> None:
    settings = check_settings(
        check_source_key=KEY,
        check_push_timeout_seconds=1.0,
        check_interval_seconds=10.0,
        check_backoff=True,
        check_backoff_factor=3.0,
        check_max=5,
    )
    with silent_port() as silent:
        port = closed_port() if dead == "nothing listening" else silent
        async with Coordinator.connect(database_url, settings) as core:
            await core.check_sources.set(GROUP, f"postgresql://app:pw@127.0.0.1:{port}/orders")
            await core.check_sources.set(OTHER, producer_db.tcp_url(proxy.port))
            stuck = await _prepared(core, 2)
            other = await _prepared(core, 2, group=OTHER)
            producer_db.mark_committed(other[0].transaction_id)
            offsets = [s.offset for s in stuck + other]

            make_due(db, *offsets)
            await core.checkback.rounds.run_round()
            # the other group's checks settle while the dead database's still hang
            for each, state in zip(other, ("committed", "rolled_back"), strict=True):
                settled = await eventually(
                    lambda offset=each.offset: _state(db, offset), lambda s: s != "prepared"
                )
                assert settled == state
            if dead == "never answers":
                # settled before the hanging checks' timeout: they still hold their slots
                assert message(db, stuck[0].offset)["check_count"] == 1
                assert check_request(db, stuck[0].offset)["status"] == "pushing"
            await core.checkback.rounds.settle()

            for each in stuck:
                state = message(db, each.offset)
                assert (state["state"], state["check_count"]) == ("prepared", 1)
                request = check_request(db, each.offset)
                assert request is not None
                assert request["status"] == CheckStatus.FAILED.value
                assert request["via"] == DispatchMode.DATABASE.value
                assert "database" in request["detail"] or "refused" in request["detail"]
                # the next check waits for the interval, as after a failed push
                assert state["next_check_at"] - request["claimed_at"] >= timedelta(seconds=9)
            source = await core.check_sources.get(GROUP)
            assert source.last_ok is False and source.last_error
            assert source.consecutive_failures == 2

            # the second check is backed off: the interval times the factor
            make_due(db, *(s.offset for s in stuck))
            await core.checkback.rounds.run_round()
            await core.checkback.rounds.settle()
            for each in stuck:
                state = message(db, each.offset)
                request = check_request(db, each.offset)
                assert request is not None and state["check_count"] == 2
                assert state["next_check_at"] - request["claimed_at"] >= timedelta(seconds=29)


async def test_the_password_is_never_stored_nor_shown_in_clear(
    core: Coordinator, db: psycopg.Connection
) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    shown = await core.check_sources.set(
        GROUP, f"postgresql://app:{password}@127.0.0.1:5432/orders", barrier_table="app.barrier"
    )
    assert password not in repr(shown)
    assert shown.url == "postgresql://app:***@127.0.0.1:5432/orders"
    tables = [
        row[0]
        for row in db.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'coordinator'"
        ).fetchall()
    ]
    for table in tables:
        (found,) = db.execute(
            f"SELECT count(*) FROM {table} AS t WHERE t::text LIKE %s", (f"%{password}%",)
        ).fetchone()
        assert found == 0, table
    listed = await core.check_sources.list()
    assert [s.url for s in listed] == ["postgresql://app:***@127.0.0.1:5432/orders"]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgresql://app:pw@169.254.169.254/orders", "link-local"),
        ("postgresql://app@[fe80::1]:5432/orders", "link-local"),
        ("postgresql://app@metadata.google.internal/orders", "metadata"),
        ("postgresql://app@0.0.0.0/orders", "unspecified"),
        ("postgresql://app@/orders?host=/tmp", "one TCP host"),
        ("postgresql://app@db.example/orders?hostaddr=169.254.169.254", "not allowed"),
        ("postgresql://app@db.example/orders?sslkey=/etc/key", "not allowed"),
        ("http://db.example/orders", "postgresql://"),
        ("postgresql://db.example/orders", "user"),
    ],
)
async def test_forbidden_urls_are_refused_with_a_sentence(
    core: Coordinator, url: str, why: str
) -> None:
    with pytest.raises(InvalidMessage, match=why):
        await core.check_sources.set(GROUP, url)


async def test_bad_tables_and_modes_are_refused(core: Coordinator) -> None:
    url = "postgresql://app@127.0.0.1/orders"
    with pytest.raises(InvalidMessage, match="barrier_table"):
        await core.check_sources.set(GROUP, url, barrier_table="x; DROP TABLE y")
    with pytest.raises(InvalidMessage, match="mode"):
        await core.check_sources.set(GROUP, url, mode="sometimes")
    assert await core.check_sources.list() == []


async def test_a_host_name_is_resolved_at_the_check_and_each_address_tried(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
) -> None:
    # localhost may resolve to ::1 first, where nothing listens: 127.0.0.1 is tried next
    (sent,) = await _prepared(core, 1)
    url = f"postgresql://{producer_db.user}@localhost:{proxy.port}/{producer_db.name}"
    await core.check_sources.set(GROUP, url)
    await _round(core, db, sent.offset)
    assert message(db, sent.offset)["state"] == "rolled_back"


async def test_a_name_that_resolves_to_a_forbidden_address_at_the_check_is_not_connected_to(
    core: Coordinator,
    db: psycopg.Connection,
    proxy: LoopbackProxy,
    producer_db: ProducerDatabase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Registered while the name meant loopback; by the check it means the
    # cloud metadata address (DNS rebinding). A resolver of the test's own
    # stands in for the DNS the machine cannot be told to lie with.
    (sent,) = await _prepared(core, 1)
    url = f"postgresql://{producer_db.user}@localhost:{proxy.port}/{producer_db.name}"
    await core.check_sources.set(GROUP, url)
    loop = asyncio.get_running_loop()

    async def rebound(host: str, port: int, **kwargs: object) -> list:
        assert host == "localhost"
        return [(2, 1, 6, "", ("169.254.169.254", port))]

    monkeypatch.setattr(loop, "getaddrinfo", rebound)
    await _round(core, db, sent.offset)
    assert message(db, sent.offset)["state"] == "prepared"
    request = check_request(db, sent.offset)
    assert request is not None and request["status"] == CheckStatus.FAILED.value
    # refused before connecting: not a connection that timed out
    assert "169.254.169.254" in request["detail"] and "does not connect" in request["detail"]
