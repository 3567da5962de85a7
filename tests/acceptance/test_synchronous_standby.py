"""A synchronous standby that does not confirm: nothing unconfirmed is acknowledged.

With synchronous replication a commit is written locally first and then
waits for the standby. If that wait is cancelled, PostgreSQL keeps the
commit, locally only, and says no more than a WARNING; a failover then loses
it. These tests make the standby go silent on one server of their own
(`synchronous_standby_names` naming a standby that never connects: every
commit waits, as when replication is cut) and check, through the HTTP door:

- a prepare or an end whose wait is cancelled is answered 503, never 2xx;
- a repeat of it (same message id, same end) is not answered 2xx either
  while the standby has not confirmed it, and is once it has;
- a request stuck on its commit is answered 503 at `database_deadline_seconds`,
  and its connection is closed, not cancelled: the commit stays invisible
  instead of turning into a local-only one.

The Patroni tests (tests/ha/) show the same against a real cluster and a
failover; these run in seconds on one server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core.ids import new_message_id
from tests.conftest import LiveServer
from tests.own_postgres import OwnPostgres, own_postgres

pytestmark = pytest.mark.slow

DEADLINE = 2.0
# What a loaded machine may add to an answer after the deadline.
SLACK = 4.0
PRODUCERS = "order-service"


@pytest.fixture(scope="module")
def server() -> Iterator[OwnPostgres]:
    with own_postgres() as postgres:
        yield postgres


@pytest.fixture
def database(server: OwnPostgres, request: pytest.FixtureRequest) -> str:
    return server.migrated_database(f"sync_{abs(hash(request.node.name)) % 10**9}")


@pytest.fixture
def admin(server: OwnPostgres) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        yield conn
        _standby_names(conn, "")  # whatever the test did


@pytest.fixture
def live(database: str) -> Iterator[LiveServer]:
    settings = Settings(database_url=None, database_deadline_seconds=DEADLINE)
    with LiveServer(database, settings) as live:
        yield live


def _standby_names(admin: psycopg.Connection, names: str) -> None:
    if names:
        admin.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    else:
        admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
    admin.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 10
    while admin.execute("SHOW synchronous_standby_names").fetchone()[0] != names:
        assert time.monotonic() < deadline, "the server did not reload its configuration"
        time.sleep(0.05)


@contextmanager
def standby_silent(admin: psycopg.Connection) -> Iterator[None]:
    """Every commit that writes waits for a standby that never answers, until the block ends."""
    _standby_names(admin, "ghost_standby")
    try:
        yield
    finally:
        _standby_names(admin, "")


def _waiting_commits(admin: psycopg.Connection) -> list[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE wait_event = 'SyncRep' AND backend_type = 'client backend' ORDER BY pid"
    ).fetchall()
    return [pid for (pid,) in rows]


def _cancel(admin: psycopg.Connection, pids: list[int]) -> None:
    """pg_cancel_backend: what an operator, or a client's cancel, does to a waiting commit."""
    for pid in pids:
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))


def _until_waiting(admin: psycopg.Connection, count: int = 1) -> list[int]:
    deadline = time.monotonic() + 10
    while len(pids := _waiting_commits(admin)) < count:
        assert time.monotonic() < deadline, "no commit waited for the standby"
        time.sleep(0.02)
    return pids


@dataclass
class Call:
    """A request sent from a thread, so that the test can act while it waits."""

    url: str
    body: dict
    response: httpx.Response | None = None
    took: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Call:
        threading.Thread(target=self._send, daemon=True).start()
        return self

    def _send(self) -> None:
        started = time.monotonic()
        try:
            self.response = httpx.post(self.url, json=self.body, timeout=60)
        finally:
            self.took = time.monotonic() - started
            self.done.set()

    def answer(self) -> httpx.Response:
        assert self.done.wait(60), "no answer within 60 s"
        assert self.response is not None
        return self.response


def _prepare_body(message_id: str) -> dict:
    return {
        "topic": "orders",
        "producer_group": PRODUCERS,
        "message_id": message_id,
        "body_text": f"order {message_id}",
    }


def _prepare(live: LiveServer, message_id: str) -> Call:
    return Call(f"{live.url}/v1/transactions", _prepare_body(message_id)).start()


def _end(live: LiveServer, transaction_id: str, resolution: str = "commit") -> Call:
    body = {"producer_group": PRODUCERS, "resolution": resolution}
    return Call(f"{live.url}/v1/transactions/{transaction_id}/end", body).start()


def _unavailable(response: httpx.Response) -> str:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable"
    return response.json()["message"]


def _stored(db_url: str, message_id: str) -> dict | None:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT state FROM messages WHERE message_id = %s", (message_id,)
        ).fetchone()
    return {"state": row[0]} if row else None


def test_a_prepare_whose_synchronous_wait_is_cut_is_answered_503_and_its_repeat_waits_for_it(
    live: LiveServer, admin: psycopg.Connection, database: str
) -> None:
    message_id = new_message_id()
    with standby_silent(admin):
        first = _prepare(live, message_id)
        _cancel(admin, _until_waiting(admin))
        message = _unavailable(first.answer())
        assert "synchronous standby did not confirm" in message
        # Committed locally only: a failover now would lose it.
        assert _stored(database, message_id) == {"state": "prepared"}

        # The client resends, as told. The row is there, but the standby does
        # not have it: no 2xx until it does, however often it is asked.
        repeat = _prepare(live, message_id)
        message = _unavailable(repeat.answer())
        assert f"within {DEADLINE:g} s" in message
        assert repeat.took < DEADLINE + SLACK
    # The standby is back (here: none is required any more): the repeat is
    # answered from the stored row.
    answer = _prepare(live, message_id).answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["created"] is False
    assert answer.json()["state"] == "prepared"


def test_an_end_whose_synchronous_wait_is_cut_is_answered_503_and_its_repeat_waits_for_it(
    live: LiveServer, admin: psycopg.Connection, database: str
) -> None:
    message_id = new_message_id()
    prepared = _prepare(live, message_id).answer()
    assert prepared.status_code == 201, prepared.text
    transaction_id = prepared.json()["transaction_id"]
    with standby_silent(admin):
        first = _end(live, transaction_id)
        _cancel(admin, _until_waiting(admin))
        assert "synchronous standby did not confirm" in _unavailable(first.answer())
        assert _stored(database, message_id) == {"state": "committed"}

        repeat = _end(live, transaction_id)
        assert f"within {DEADLINE:g} s" in _unavailable(repeat.answer())
    answer = _end(live, transaction_id).answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["changed"] is False
    assert answer.json()["state"] == "committed"


def test_a_request_stuck_on_its_commit_is_answered_at_the_deadline_and_its_commit_is_not_cancelled(
    live: LiveServer, admin: psycopg.Connection, database: str
) -> None:
    message_id = new_message_id()
    with standby_silent(admin):
        stuck = _prepare(live, message_id)
        pids = _until_waiting(admin)
        assert "(database_deadline_seconds)" in _unavailable(stuck.answer())
        assert DEADLINE - 0.5 < stuck.took < DEADLINE + SLACK
        # Closed, not cancelled: the commit still waits for the standby, and
        # until the standby has it nobody sees the message.
        time.sleep(0.5)
        assert set(pids) <= set(_waiting_commits(admin))
        assert _stored(database, message_id) is None
        # Other requests are answered meanwhile (also 503: every commit waits).
        other = _prepare(live, new_message_id())
        _unavailable(other.answer())
    # Once the standby confirms, the first commit completes: the outcome the
    # client could not know is "stored", and its resend says so.
    deadline = time.monotonic() + 10
    while _stored(database, message_id) is None:
        assert time.monotonic() < deadline, "the waiting commit did not complete"
        time.sleep(0.05)
    answer = _prepare(live, message_id).answer()
    assert answer.status_code == 200, answer.text
    assert answer.json()["created"] is False


def test_a_batch_with_a_cancelled_synchronous_wait_answers_every_request_503(
    live: LiveServer, admin: psycopg.Connection
) -> None:
    """Group commit: every request of the cut batch is failed, none acknowledged."""
    with standby_silent(admin):
        calls = [_prepare(live, new_message_id()) for _ in range(8)]
        _until_waiting(admin)
        time.sleep(0.3)  # let the other requests queue behind the waiting batch
        _cancel(admin, _waiting_commits(admin))
        # Later batches also wait and are cancelled, or reach the deadline.
        deadline = time.monotonic() + DEADLINE + SLACK
        while not all(call.done.is_set() for call in calls):
            _cancel(admin, _waiting_commits(admin))
            assert time.monotonic() < deadline, "requests were not answered in time"
            time.sleep(0.05)
        statuses = [call.answer().status_code for call in calls]
    assert statuses == [503] * len(calls)
