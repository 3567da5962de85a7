"""Faults injected into real processes: what the coordinator promises must survive them.

- `coordinator serve` SIGKILLed under load, then started again on its database;
- one of two nodes on one database SIGKILLed for good under load;
- a producer process SIGKILLed between its half messages and their ends;
- a group-commit batch whose connection dies after PostgreSQL committed it,
  before the answer came back.

After each: every prepare and end that was answered 2xx is in the database
as answered; every half message left prepared is resolved by check-back
with the producer's own answer, exactly once; a consumer group subscribed
beforehand receives exactly the committed messages, each once. Load clients
record what they were told; check-backs are answered from the same record
(the producers' "local transactions"), so any lost, duplicated or wrongly
resolved message shows.

Every process is started in a session of its own and stopped at the end of
its block (tests/processes.py); every wait is bounded and generous, and no
assertion is about speed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from coordinator.client import (
    AsyncTransactionListener,
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    RetryPolicy,
)
from coordinator.db.queries import query
from tests.own_postgres import OwnPostgres, own_postgres
from tests.processes import (
    HOLD,
    CheckReceiver,
    Push,
    ServeProcess,
    clean_environment,
    coordinator_serve,
    kill_group,
    stop_group,
)

pytestmark = pytest.mark.slow

GROUP = "order-producers"
TOPIC = "orders"
CONSUMERS = "billing"
INSTANCE = "order-service-1"

# Short check-back timings, so a half message nobody ends is checked within
# seconds. The check interval is the time a node's claim holds a message:
# long enough that a node killed right after claiming dies before any other
# node may claim the same message again.
FAST_CHECKS: dict[str, object] = {
    "transaction_timeout_seconds": 2,
    "check_interval_seconds": 5,
    "check_scan_interval_seconds": 0.3,
    "check_max": 1000,  # never discard: every message must end resolved
    "producer_ttl_seconds": 600,  # the push instance is registered once
    "check_push_timeout_seconds": 60,  # a held push stays in flight until its node dies
}

PRODUCERS = 32  # concurrent load clients
RESOLVED_WITHIN = 120.0  # seconds for check-back to resolve what is left prepared
STATE_OF = {"commit": "committed", "rollback": "rolled_back"}


def _new_message_id() -> str:
    # As the SDK mints them: before the first attempt, so a resend is a repeat.
    return uuid.uuid4().hex.upper()


# --- load: producers that record every answer ----------------------------------


@dataclass
class Transaction:
    message_id: str
    outcome: str  # what the producer's local transaction did: "commit" or "rollback"
    sends_end: bool  # False: the producer dies before ending; only check-back can
    prepared: dict[str, Any] | None = None  # the 2xx answer to the prepare
    ended: dict[str, Any] | None = None  # the 2xx answer to the end


@dataclass
class Node:
    name: str
    url: str
    client: httpx.AsyncClient


@dataclass
class Ledger:
    """What the load clients sent and what they were told."""

    transactions: dict[str, Transaction] = field(default_factory=dict)
    answers: list[tuple[str, float]] = field(default_factory=list)  # node, time of each 2xx
    lost: int = 0  # requests whose answer never came (and were not answered by a retry)
    refused: list[str] = field(default_factory=list)  # non-2xx answers: none is expected
    failovers: int = 0  # attempts that failed on one node and were sent to the other
    ended: int = 0  # ends answered 2xx (a count, which check-back threads read safely)

    def new_transaction(self, rng: random.Random) -> Transaction:
        tx = Transaction(
            message_id=_new_message_id(),
            outcome="commit" if rng.random() < 0.65 else "rollback",
            sends_end=rng.random() < 0.85,
        )
        # Recorded before the prepare is sent: a check-back may come for a
        # message whose prepare answer is lost, and must be answered too.
        self.transactions[tx.message_id] = tx
        return tx

    def check_answer(self, push: Push) -> str:
        """A check-back answered as the producer would: from its local transaction."""
        return self.transactions[push.message_id].outcome

    def answered_by(self, node: str, since: float) -> int:
        return sum(1 for name, at in self.answers if name == node and at >= since)

    async def call(
        self, nodes: list[Node], preferred: int, path: str, body: dict[str, Any], failover: bool
    ) -> tuple[dict[str, Any] | None, int]:
        """POST to nodes[preferred]; with failover, resend to the other node until answered.

        Returns the 2xx answer (None when there is none) and the node to use next.
        """
        node = preferred
        for _ in range(40 if failover else 1):
            target = nodes[node]
            try:
                response = await target.client.post(path, json=body)
            except httpx.TransportError:
                pass
            else:
                if response.is_success:
                    self.answers.append((target.name, time.monotonic()))
                    return response.json(), node
                self.refused.append(f"{target.name} {path}: {response.status_code} {response.text}")
                if response.status_code < 500:
                    return None, node
            if failover:  # as a client with two endpoints would: try the other one
                self.failovers += 1
                node = (node + 1) % len(nodes)
                await asyncio.sleep(0.05)
        self.lost += 1
        return None, node


async def _producer(
    ledger: Ledger, nodes: list[Node], index: int, stop: asyncio.Event, failover: bool
) -> None:
    rng = random.Random(index)
    node = index % len(nodes)
    while not stop.is_set():
        tx = ledger.new_transaction(rng)
        message = {
            "topic": TOPIC,
            "producer_group": GROUP,
            "message_id": tx.message_id,
            "body_text": f"order {tx.message_id}: {tx.outcome}",
        }
        tx.prepared, node = await ledger.call(nodes, node, "/v1/transactions", message, failover)
        if tx.prepared is None or not tx.sends_end:
            continue
        end = {"producer_group": GROUP, "resolution": tx.outcome, "message_id": tx.message_id}
        path = f"/v1/transactions/{tx.prepared['transaction_id']}/end"
        tx.ended, node = await ledger.call(nodes, node, path, end, failover)
        ledger.ended += tx.ended is not None


async def _run_load(
    urls: dict[str, str],
    ledger: Ledger,
    until: Callable[[], Awaitable[None]],
    *,
    failover: bool,
) -> None:
    """PRODUCERS concurrent producers until `until()` returns (or fails)."""
    limits = httpx.Limits(max_connections=2 * PRODUCERS, max_keepalive_connections=2 * PRODUCERS)
    clients = {
        name: httpx.AsyncClient(base_url=url, timeout=60, limits=limits)
        for name, url in urls.items()
    }
    nodes = [Node(name, url, clients[name]) for name, url in urls.items()]
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(_producer(ledger, nodes, i, stop, failover)) for i in range(PRODUCERS)
    ]
    try:
        await until()
    finally:
        stop.set()
        # Each producer finishes the transaction it is in (with failover, its
        # end too); a request to a dead node fails at once.
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=180)
        for client in clients.values():
            await client.aclose()
    crashed = [t.exception() for t in tasks if t.exception() is not None]
    assert not crashed, crashed


async def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.05)


# --- what the database and a consumer show afterwards ---------------------------


def _subscribe(url: str) -> None:
    response = httpx.put(
        f"{url}/v1/consumer-groups/{CONSUMERS}/subscriptions/{TOPIC}",
        json={"expression": "*"},
        timeout=30,
    )
    assert response.status_code == 201, response.text


def _register_push_producer(url: str, check_url: str) -> None:
    response = httpx.post(
        f"{url}/v1/producers/{GROUP}/instances/{INSTANCE}/heartbeat",
        json={"check_url": check_url},
        timeout=30,
    )
    assert response.status_code == 200, response.text


def _rows(db: psycopg.Connection) -> dict[str, dict[str, Any]]:
    cursor = db.execute(
        "SELECT message_id, id AS offset, transaction_id, state, resolution_source "
        "FROM messages WHERE producer_group = %s",
        (GROUP,),
    )
    names = [c.name for c in cursor.description]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def _still_prepared(db: psycopg.Connection) -> int:
    (count,) = db.execute(
        "SELECT count(*) FROM messages WHERE producer_group = %s AND state = 'prepared'", (GROUP,)
    ).fetchone()
    return count


def _wait_until_resolved(db: psycopg.Connection, timeout: float = RESOLVED_WITHIN) -> None:
    deadline = time.monotonic() + timeout
    while (left := _still_prepared(db)) > 0:
        if time.monotonic() > deadline:
            raise AssertionError(f"{left} half messages still prepared after {timeout} s")
        time.sleep(0.2)


def _resolutions_per_message(db: psycopg.Connection) -> Counter[int]:
    """How many times each message of the group left `prepared` (history rows)."""
    rows = db.execute(
        "SELECT h.message_offset, count(*) FROM message_history h "
        "JOIN messages m ON m.id = h.message_offset "
        "WHERE m.producer_group = %s AND h.from_state = 'prepared' GROUP BY 1",
        (GROUP,),
    ).fetchall()
    return Counter(dict(rows))


def _assert_every_answer_stands(db: psycopg.Connection, ledger: Ledger) -> dict[str, dict]:
    """Answered prepares and ends are stored as answered; every message ends as its
    producer's local transaction did, resolved exactly once. Returns the rows."""
    rows = _rows(db)
    assert rows.keys() <= ledger.transactions.keys(), "a message nobody sent"
    for tx in ledger.transactions.values():
        row = rows.get(tx.message_id)
        if tx.prepared is not None:
            assert row is not None, f"answered prepare {tx.message_id} lost"
            assert (row["offset"], row["transaction_id"]) == (
                tx.prepared["offset"],
                tx.prepared["transaction_id"],
            )
        if tx.ended is not None:
            assert tx.ended["state"] == STATE_OF[tx.outcome]
        if row is not None:
            assert row["state"] == STATE_OF[tx.outcome], (tx, row)
            if not tx.sends_end:
                assert row["resolution_source"] == "check", (tx, row)
    resolutions = _resolutions_per_message(db)
    assert sorted(resolutions) == sorted(row["offset"] for row in rows.values())
    assert set(resolutions.values()) == {1}, "a message resolved twice"
    return rows


def _drain(url: str, expected: set[str], timeout: float = 60.0) -> Counter[str]:
    """Receive and ack the consumer group's messages until `expected` all came and
    one more receive finds nothing; how often each message id was received."""
    received: Counter[str] = Counter()
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=30) as client:
        while True:
            answer = client.post(
                f"/v1/consumer-groups/{CONSUMERS}/receive",
                json={"max_messages": 500, "invisible_seconds": 300, "wait_seconds": 1},
            )
            assert answer.status_code == 200, answer.text
            messages = answer.json()["messages"]
            received.update(m["message_id"] for m in messages)
            if messages:
                acked = client.post(
                    f"/v1/consumer-groups/{CONSUMERS}/ack/batch",
                    json={"receipt_handles": [m["receipt_handle"] for m in messages]},
                )
                assert {r["outcome"] for r in acked.json()["results"]} == {"acked"}
            elif received.keys() >= expected:
                return received
            if time.monotonic() > deadline:
                missing = len(expected - received.keys())
                raise AssertionError(f"{missing} committed messages not received in {timeout} s")


def _assert_consumers_get_exactly_the_commits(url: str, rows: dict[str, dict]) -> None:
    committed = {mid for mid, row in rows.items() if row["state"] == "committed"}
    assert committed, "nothing was committed"
    received = _drain(url, committed)
    assert received == Counter(dict.fromkeys(committed, 1))


# --- 1. one node SIGKILLed under load, restarted on its database ----------------


def test_a_coordinator_killed_under_load_keeps_every_answer_once_restarted(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    ledger = Ledger()
    with CheckReceiver(ledger.check_answer) as producer_checks:
        with coordinator_serve(database_url, tmp_path, "first", **FAST_CHECKS) as first:
            _subscribe(first.url)
            _register_push_producer(first.url, producer_checks.url)

            async def kill_mid_load() -> None:
                await _wait_for(lambda: ledger.ended >= 200, "200 ends answered")
                first.kill()

            asyncio.run(_run_load({"first": first.url}, ledger, kill_mid_load, failover=False))

        # The kill cut requests off mid-flight: their outcome is unknown to
        # the clients, and check-back must settle those left prepared.
        assert ledger.lost >= 1
        assert ledger.refused == []
        left = {mid for mid, row in _rows(db).items() if row["state"] == "prepared"}
        assert left, "the kill left no half message for check-back to resolve"

        with coordinator_serve(database_url, tmp_path, "restarted", **FAST_CHECKS) as restarted:
            _wait_until_resolved(db)
            rows = _assert_every_answer_stands(db, ledger)
            # Only the restarted node could resolve what the kill left
            # prepared, and it did by asking the producer.
            assert {rows[mid]["resolution_source"] for mid in left} == {"check"}
            _assert_consumers_get_exactly_the_commits(restarted.url, rows)


# --- 2. two nodes, one SIGKILLed for good under load ----------------------------


def test_when_one_of_two_nodes_dies_the_other_answers_and_takes_over_its_check_backs(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    ledger = Ledger()
    # Each node signs its pushes with a secret of its own, so the producer's
    # check URL knows which node claimed each message.
    secrets = {"doomed": "doomed-node-secret", "survivor": "survivor-node-secret"}
    killed = threading.Event()
    held: dict[int, Push] = {}  # offset -> the doomed node's push, never answered

    def answer(push: Push) -> str | None:
        tx = ledger.transactions[push.message_id]
        under_load = ledger.ended >= 50
        if push.signer == "doomed" and not tx.sends_end and under_load and not killed.is_set():
            # A message only check-back can resolve, claimed by the node that
            # is about to die: keep its push in flight until the node is gone
            # (which the test sees to at once).
            held[push.offset] = push
            return HOLD
        return tx.outcome

    with (
        CheckReceiver(answer, secrets) as producer_checks,
        coordinator_serve(
            database_url,
            tmp_path,
            "doomed",
            check_push_secret=secrets["doomed"],
            **FAST_CHECKS,
        ) as doomed,
        coordinator_serve(
            database_url,
            tmp_path,
            "survivor",
            check_push_secret=secrets["survivor"],
            **FAST_CHECKS,
        ) as survivor,
    ):
        _subscribe(survivor.url)
        _register_push_producer(survivor.url, producer_checks.url)
        claimed_at_kill: list[Push] = []
        kill_time = 0.0

        async def kill_one_node_mid_load() -> None:
            nonlocal kill_time
            await _wait_for(lambda: bool(held), "a claim of the doomed node")
            kill_time = time.monotonic()
            doomed.kill()
            killed.set()
            # What the doomed node had claimed and not finished, and nobody
            # else may claim before the check interval has passed.
            rows = _rows(db)
            claimed_at_kill.extend(
                push for push in list(held.values()) if rows[push.message_id]["state"] == "prepared"
            )
            # Load goes on, on the survivor alone.
            await _wait_for(
                lambda: ledger.answered_by("survivor", since=kill_time) >= 300,
                "300 answers from the survivor after the kill",
            )

        asyncio.run(
            _run_load(
                {"doomed": doomed.url, "survivor": survivor.url},
                ledger,
                kill_one_node_mid_load,
                failover=True,
            )
        )

        # The clients of the killed node failed over, and every request was
        # answered in the end: nothing refused, nothing given up.
        assert ledger.failovers >= 1
        assert ledger.lost == 0 and ledger.refused == []
        assert all(tx.prepared for tx in ledger.transactions.values())
        assert all(tx.ended for tx in ledger.transactions.values() if tx.sends_end)

        _wait_until_resolved(db)
        rows = _assert_every_answer_stands(db, ledger)

        # The claims the doomed node died with were checked again by the
        # survivor, with a later check, and resolved by it.
        assert claimed_at_kill, "the doomed node held no claim when it died"
        pushes = producer_checks.pushes()
        for push in claimed_at_kill:
            later = [
                p
                for p in pushes
                if p.offset == push.offset and p.signer == "survivor" and p.at > push.at
            ]
            assert later, f"message {push.offset} claimed by the dead node was never checked again"
            assert min(p.check_count for p in later) > push.check_count
            assert rows[push.message_id]["resolution_source"] == "check"
        _assert_consumers_get_exactly_the_commits(survivor.url, rows)


# --- 3. a producer SIGKILLed between its half messages and their ends -----------


class JournalListener(AsyncTransactionListener):
    """Another instance of the producer group, answering from the same local database."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.checked: list[str] = []

    async def execute_local_transaction(
        self, msg: Message, arg: Any
    ) -> LocalTransactionState | None:
        raise AssertionError("this instance sends nothing")

    async def check_local_transaction(self, msg: Message) -> LocalTransactionState | None:
        assert msg.message_id is not None
        self.checked.append(msg.message_id)
        outcome = _journal(self.journal).get(msg.message_id)
        return LocalTransactionState(outcome) if outcome else LocalTransactionState.UNKNOWN


def _journal(path: Path) -> dict[str, str]:
    """message id -> outcome of the complete lines of a crashing producer's journal."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines(keepends=True)
    entries = [json.loads(line) for line in lines if line.endswith("\n")]
    return {entry["message_id"]: entry["outcome"] for entry in entries}


@contextmanager
def _crashing_producer(
    url: str, journal: Path, outcomes: list[str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    script = Path(__file__).parents[1] / "crashing_producer.py"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, str(script), url, GROUP, TOPIC, str(journal), *outcomes],
            env=clean_environment({}),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        stop_group(process)


def test_a_producer_killed_between_half_message_and_end_is_resolved_by_another_instance(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    outcomes = ["commit", "rollback", "commit", "commit", "rollback", "commit"]
    journal = tmp_path / "local-transactions.jsonl"
    settings = {
        **FAST_CHECKS,
        "transaction_timeout_seconds": 1,
        "check_interval_seconds": 1,
        # The dead instance stops counting as live soon, so its check
        # requests go to the instance still alive.
        "producer_ttl_seconds": 3,
        "check_poll_fallback_seconds": 0.2,
    }
    with coordinator_serve(database_url, tmp_path, **settings) as server:
        _subscribe(server.url)
        with _crashing_producer(server.url, journal, outcomes, tmp_path / "producer.log") as doomed:
            deadline = time.monotonic() + 60
            while len(_journal(journal)) < len(outcomes):
                assert doomed.poll() is None, (tmp_path / "producer.log").read_text()
                assert time.monotonic() < deadline, "the producer never ran its local transactions"
                time.sleep(0.05)
            kill_group(doomed)
            doomed.wait(timeout=20)

        decided = _journal(journal)
        # Between the half messages and their ends: stored, none ended.
        rows = _rows(db)
        assert rows.keys() == decided.keys()
        assert {row["state"] for row in rows.values()} == {"prepared"}

        listener = JournalListener(journal)

        async def another_instance_answers() -> None:
            producer = AsyncTransactionProducer(
                GROUP, listener, server.url, instance_id="order-service-2", check_wait_seconds=1
            )
            async with producer:
                await asyncio.to_thread(_wait_until_resolved, db, 60)

        asyncio.run(another_instance_answers())

        rows = _rows(db)
        assert {mid: row["state"] for mid, row in rows.items()} == {
            mid: STATE_OF[outcome] for mid, outcome in decided.items()
        }
        assert {row["resolution_source"] for row in rows.values()} == {"check"}
        assert set(listener.checked) == decided.keys()
        assert set(_resolutions_per_message(db).values()) == {1}
        received = _drain(server.url, {mid for mid, o in decided.items() if o == "commit"})
        assert received == Counter({mid: 1 for mid, o in decided.items() if o == "commit"})


# --- 4. a batch's connection dies after COMMIT, before the answer ---------------


class CommitTrap:
    """Makes every commit wait after it is durable locally, then breaks its connection.

    With `synchronous_standby_names` naming a standby that never connects,
    each transaction that writes is committed and flushed locally, then
    waits (wait event SyncRep) for that standby's confirmation. Terminating
    the waiting backend ends the wait: PostgreSQL warns that the transaction
    has already committed locally and closes the connection. The client
    (here the coordinator's group commit) sees its connection die with its
    COMMIT durable but unacknowledged: the answer is lost, the write is not.
    """

    def __init__(self, admin: psycopg.Connection, dbname: str) -> None:
        self.admin = admin
        self.dbname = dbname
        self.cuts = 0
        # What the probe writes: a commit waits for a standby only if it wrote WAL.
        admin.execute("CREATE TABLE IF NOT EXISTS commit_trap_probe (at timestamptz)")

    def arm(self) -> None:
        self._standby("nobody")
        self._until(self._commit_waits, "commits waiting for the standby")

    def disarm(self) -> None:
        self._standby(None)
        self._until(lambda: not self._commit_waits(), "commits going through again")

    def cut(self, query_name: str) -> bool:
        """Terminate the backends whose named query waits for the standby; any?"""
        # pg_stat_activity shows the statement as sent: its text up to the
        # first parameter is the named query's own (and well within
        # track_activity_query_size).
        head = query(query_name).split("%(")[0]
        pids = [
            pid
            for (pid,) in self.admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s "
                "AND wait_event = 'SyncRep' AND starts_with(query, %s)",
                (self.dbname, head),
            ).fetchall()
        ]
        for pid in pids:
            self.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        self.cuts += len(pids)
        return bool(pids)

    def _standby(self, names: str | None) -> None:
        if names is None:
            self.admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        else:
            self.admin.execute(
                sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(
                    sql.Literal(names)
                )
            )
        self.admin.execute("SELECT pg_reload_conf()")

    def _commit_waits(self) -> bool:
        """Whether a write of the test's own waits for the standby after its commit
        (then it is cancelled, which leaves it committed locally)."""
        with psycopg.connect(self.admin.info.dsn, autocommit=True) as probe:
            pid = probe.info.backend_pid
            done = threading.Event()

            def write() -> None:
                probe.execute("INSERT INTO commit_trap_probe VALUES (now())")
                done.set()

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            deadline = time.monotonic() + 30
            while not done.is_set():
                (waiting,) = self.admin.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE pid = %s AND wait_event = 'SyncRep'",
                    (pid,),
                ).fetchone()
                if waiting:
                    self.admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
                    writer.join(timeout=10)
                    return True
                assert time.monotonic() < deadline, "the probe neither committed nor waited"
                time.sleep(0.02)
            writer.join()
            return False

    def _until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"{what}: not within 30 s"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def own_server() -> Iterator[OwnPostgres]:
    """A PostgreSQL of this module's own: its configuration is changed under load."""
    with own_postgres("coordinator-fault-pg-") as server:
        yield server


@contextmanager
def _trapped_coordinator(
    own_server: OwnPostgres, tmp_path: Path
) -> Iterator[tuple[ServeProcess, CommitTrap, psycopg.Connection]]:
    dbname = f"faults_{uuid.uuid4().hex[:12]}"
    url = own_server.migrated_database(dbname)
    with psycopg.connect(own_server.url(), autocommit=True) as admin:
        trap = CommitTrap(admin, dbname)
        # No check-back job: its claims are commits too, and would be caught
        # in the trap along with the requests under test.
        with (
            psycopg.connect(url, autocommit=True) as db,
            coordinator_serve(url, tmp_path, check_scheduler_enabled="false") as server,
        ):
            try:
                _subscribe(server.url)
                yield server, trap, db
            finally:
                # Before the coordinator stops: nothing may wait for a standby then.
                trap.disarm()


async def _cut_after_commit(
    trap: CommitTrap, query_name: str, requests: list[Awaitable[httpx.Response]]
) -> list[httpx.Response]:
    """Send `requests` together with the trap armed; cut every connection whose
    commit of `query_name` waits, until all are answered; the answers."""
    await asyncio.to_thread(trap.arm)
    sent = [asyncio.ensure_future(request) for request in requests]
    # Let every request reach the coordinator first: the first goes alone,
    # the rest queue behind it and are committed together in one batch.
    await asyncio.sleep(1.0)
    deadline = time.monotonic() + 60
    while not all(task.done() for task in sent):
        assert time.monotonic() < deadline, "requests neither committed nor failed in 60 s"
        await asyncio.to_thread(trap.cut, query_name)
        await asyncio.sleep(0.1)
    await asyncio.to_thread(trap.disarm)
    return [task.result() for task in sent]


def _assert_retryable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"] == "database_unavailable"


def _bodies(db: psycopg.Connection) -> Counter[str]:
    """How many messages of the group hold each body."""
    rows = db.execute("SELECT body FROM messages WHERE producer_group = %s", (GROUP,)).fetchall()
    return Counter(bytes(body).decode() for (body,) in rows)


def test_a_batch_committed_but_unanswered_is_answered_as_a_repeat_when_sent_again(
    own_server: OwnPostgres, tmp_path: Path
) -> None:
    ids = [_new_message_id() for _ in range(6)]
    messages = [
        {"topic": TOPIC, "producer_group": GROUP, "message_id": mid, "body_text": f"order {i}"}
        for i, mid in enumerate(ids)
    ]
    # Sent without an id, the coordinator mints one: they share the batches,
    # and must be stored once each too (a resend of theirs could not be
    # recognised, so the client here never resends them).
    anonymous = [
        {"topic": TOPIC, "producer_group": GROUP, "body_text": f"anonymous {i}"} for i in range(4)
    ]
    sent = messages + anonymous
    with _trapped_coordinator(own_server, tmp_path) as (server, trap, db):

        async def scenario() -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=90) as client:
                # Prepares: committed, then the answer lost.
                first = await _cut_after_commit(
                    trap,
                    "insert_messages",
                    [client.post("/v1/transactions", json=m) for m in sent],
                )
                # Each request committed exactly once, though none was answered.
                assert _bodies(db) == Counter(m["body_text"] for m in sent)
                for response in first:
                    _assert_retryable(response)
                assert trap.cuts < len(sent), "no batch of several requests was cut"
                stored = _rows(db)
                assert stored.keys() >= set(ids)
                assert {r["state"] for r in stored.values()} == {"prepared"}

                again = [await client.post("/v1/transactions", json=m) for m in messages]
                for mid, response in zip(ids, again, strict=True):
                    assert response.status_code == 200, response.text
                    answer = response.json()
                    assert answer["created"] is False
                    assert answer["offset"] == stored[mid]["offset"]
                    assert answer["transaction_id"] == stored[mid]["transaction_id"]

                # Ends: the same fault, then the same ends sent again.
                trap.cuts = 0
                ends = [
                    (
                        f"/v1/transactions/{stored[mid]['transaction_id']}/end",
                        {"producer_group": GROUP, "resolution": "commit", "message_id": mid},
                    )
                    for mid in ids
                ]
                first = await _cut_after_commit(
                    trap, "end_transactions", [client.post(p, json=b) for p, b in ends]
                )
                for response in first:
                    _assert_retryable(response)
                assert trap.cuts < len(ends), "no batch of several ends was cut"
                assert {_rows(db)[mid]["state"] for mid in ids} == {"committed"}
                for path, body in ends:
                    response = await client.post(path, json=body)
                    assert response.status_code == 200, response.text
                    assert (response.json()["state"], response.json()["changed"]) == (
                        "committed",
                        False,
                    )

                # The pool recovered from the broken connections: requests
                # are answered as usual at once.
                assert (await client.get("/health")).status_code == 200
                for i in range(20):
                    fresh = await client.post(
                        "/v1/transactions",
                        json={"topic": TOPIC, "producer_group": GROUP, "body_text": f"after {i}"},
                    )
                    assert fresh.status_code == 201, fresh.text

        asyncio.run(scenario())

        # No second copy of any message, no second resolution.
        assert len(_rows(db)) == len(sent) + 20
        assert Counter(_resolutions_per_message(db).values()) == Counter({1: len(ids)})
        received = _drain(server.url, set(ids))
        assert received == Counter(dict.fromkeys(ids, 1))


class CommitInTrap(AsyncTransactionListener):
    """Commits its local transaction, with the trap armed again for the end."""

    def __init__(self, trap: CommitTrap) -> None:
        self.trap = trap

    async def execute_local_transaction(
        self, msg: Message, arg: Any
    ) -> LocalTransactionState | None:
        await asyncio.to_thread(self.trap.arm)
        return LocalTransactionState.COMMIT

    async def check_local_transaction(self, msg: Message) -> LocalTransactionState | None:
        return LocalTransactionState.COMMIT


def test_the_sdk_retries_a_lost_commit_answer_into_one_message_and_one_resolution(
    own_server: OwnPostgres, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _trapped_coordinator(own_server, tmp_path) as (server, trap, db):

        async def cut_once(query_name: str, sending: asyncio.Future[Any]) -> None:
            # The SDK resends after its backoff: by then the trap is off, so
            # the resent request is answered.
            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(trap.cut, query_name):
                if sending.done():
                    return  # failed before it got here: awaiting it says why
                assert time.monotonic() < deadline, f"no commit of {query_name} waited"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(trap.disarm)

        async def scenario() -> Any:
            producer = AsyncTransactionProducer(
                GROUP,
                CommitInTrap(trap),
                server.url,
                instance_id="sdk",
                retry=RetryPolicy(initial_delay=0.5, max_delay=2.0),
            )
            async with producer:
                await asyncio.to_thread(trap.arm)
                sending = asyncio.ensure_future(
                    producer.send_message_in_transaction(Message(TOPIC, "order 1"))
                )
                await cut_once("insert_messages", sending)
                await cut_once("end_transactions", sending)
                return await asyncio.wait_for(sending, timeout=90)

        with caplog.at_level(logging.WARNING, logger="coordinator.client"):
            result = asyncio.run(scenario())

        assert trap.cuts == 2
        # The prepare's answer came from the resend: the message already there.
        assert result.created is False
        # The end's resend was answered too: a failed end is logged, never raised.
        assert not [r for r in caplog.records if "could not end transaction" in r.getMessage()]
        rows = _rows(db)
        assert list(rows) == [result.message_id]
        assert rows[result.message_id]["state"] == "committed"
        assert rows[result.message_id]["resolution_source"] == "client"
        assert list(_resolutions_per_message(db).values()) == [1]
        assert _drain(server.url, {result.message_id}) == Counter({result.message_id: 1})
