"""The failover load kit (bench/failover) on a live coordinator, both doors.

The load must see its own runs right: nothing acknowledged lost and every
commit delivered to both groups, through a stall in which every request is
answered "unavailable" and resent; and the verifier must see a loss when
one is planted, or it proves nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import psycopg
import pytest

from bench.failover import Door, Load, LoadConfig, outage, verify
from bench.failover.verify import MISSING, judge
from bench.rocketmq_requests import code
from bench.server import free_port
from bench.soak.verdict import Delivery
from coordinator.config import Settings
from tests.conftest import LiveServer

pytestmark = pytest.mark.slow

DEADLINE = 0.5  # database_deadline_seconds: a stalled request is answered 503 at it
STALL = 1.5
# Every attempt is answered by the deadline, plus slack for a busy machine.
ANSWER_BOUND = DEADLINE + 2.0


@pytest.fixture
def config(database_url: str) -> Iterator[LoadConfig]:
    """The load's settings, for a coordinator serving both doors on the test's database."""
    grpc_port = free_port()
    settings = Settings(
        database_url=None,
        grpc_port=grpc_port,
        database_deadline_seconds=DEADLINE,
        # Nothing but the producers' own ends may resolve a message here.
        check_scheduler_enabled=False,
    )
    with LiveServer(database_url, settings) as server:
        yield LoadConfig(
            http_url=server.url,
            grpc_target=f"127.0.0.1:{grpc_port}",
            topic="orders",
            http_producers=2,
            grpc_producers=2,
            http_consumers=1,
            grpc_consumers=1,
            seed=7,
            retry_horizon=15.0,
            request_timeout=10.0,
            wait_seconds=0.5,
            # Receives the deadline cut may still claim messages once the table is
            # free: they come back after this.
            invisible_seconds=2.0,
            longest_run=60.0,
        )


def _wait_for_oks(load: Load, since: float, count: int) -> None:
    deadline = time.monotonic() + 15
    while load.ledger.oks_since(since) < count:
        assert time.monotonic() < deadline, f"fewer than {count} requests succeeded"
        time.sleep(0.05)


@dataclass
class Stall:
    """`start` set: a transaction takes the messages table and holds it for STALL
    seconds; `held` is set once it holds it."""

    start: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def stall(database_url: str) -> Iterator[Stall]:
    stall = Stall()

    def hold() -> None:
        if not stall.start.wait(timeout=60):
            return
        with psycopg.connect(database_url) as conn:
            conn.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
            stall.held.set()
            time.sleep(STALL)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    yield stall
    stall.start.set()
    thread.join(timeout=30)


def test_the_load_loses_nothing_through_a_stall_and_measures_it(
    config: LoadConfig, database_url: str, stall: Stall
) -> None:
    with Load(config) as load:
        _wait_for_oks(load, 0.0, 40)
        stall.start.set()
        assert stall.held.wait(timeout=15)
        fault_at = time.monotonic()
        time.sleep(STALL)
        _wait_for_oks(load, time.monotonic(), 40)
        assert load.stop_producers(timeout=30)
        assert load.drain(timeout=20, quiet=1.0), "an acknowledged commit was not delivered"

    result = verify(load.ledger, database_url)
    assert result.ok, result.problems
    assert result.lost == 0
    assert not result.conflicts
    assert not result.refusals, result.refusals
    assert not result.gave_up
    # Producers end everything they prepare, so nothing is left prepared.
    assert result.ends_acked == result.prepares_acked > 0
    assert not result.left_prepared
    assert result.committed > 0
    assert {g.group for g in result.groups} == {"billing", "shipping"}
    for group in result.groups:
        assert not group.lost and not group.unexpected, group
        assert group.distinct == result.committed

    measured = outage(load.ledger, fault_at)
    for door in Door:
        seen = measured.doors[door]
        assert seen.last_ok_before is not None and seen.first_ok_after is not None
        # The stall was answered "unavailable" and resent; nothing was refused.
        assert seen.failed > 0, door
        assert seen.unanswered == 0, door
        assert seen.longest_seconds <= ANSWER_BOUND, seen.longest
        assert seen.recovered_after is not None and seen.recovered_after < STALL + ANSWER_BOUND
    unavailable = {
        (Door.HTTP, 503, "database_unavailable"),
        (Door.GRPC, code("HA_NOT_AVAILABLE"), "HA_NOT_AVAILABLE"),
    }
    answers = load.ledger.snapshot().answers
    other = [a for a in answers if not a.ok and (a.door, a.status, a.error) not in unavailable]
    assert not other, other[:5]
    slowest = max(answers, key=lambda a: a.seconds - a.waited)
    assert slowest.seconds - slowest.waited <= ANSWER_BOUND, slowest


def test_the_verifier_sees_what_was_acknowledged_and_lost(
    config: LoadConfig, database_url: str, db: psycopg.Connection
) -> None:
    with Load(replace(config, http_producers=1, grpc_producers=1)) as load:
        _wait_for_oks(load, 0.0, 60)
        assert load.stop_producers(timeout=30)
        assert load.drain(timeout=20, quiet=0.5)
    record = load.ledger.snapshot()
    assert verify(record, database_url).ok

    commits = [(m, tx) for m, tx in record.prepared.items() if record.ended[tx] == "commit"]
    rollbacks = [(m, tx) for m, tx in record.prepared.items() if record.ended[tx] == "rollback"]
    assert commits and rollbacks
    (deleted, deleted_tx), (reopened, reopened_tx) = commits[0], rollbacks[0]
    db.execute("DELETE FROM messages WHERE message_id = %s", (deleted,))
    db.execute(
        "UPDATE messages SET state = 'prepared', resolved_at = NULL, resolution_source = NULL "
        "WHERE message_id = %s",
        (reopened,),
    )

    result = verify(record, database_url)
    assert not result.ok
    assert result.lost_prepares == {deleted: MISSING}
    assert result.lost_ends == {deleted_tx: MISSING, reopened_tx: "prepared"}
    assert result.lost == 3
    assert any("half messages acknowledged and lost: 1" in p for p in result.problems)
    assert any("ends acknowledged and lost: 2" in p for p in result.problems)

    # A delivery of what was never committed, and a commit one group never got.
    billing = record.deliveries["billing"]
    missed = billing[0].message_id
    planted = replace(
        record,
        deliveries={
            **record.deliveries,
            "billing": (*(d for d in billing if d.message_id != missed), Delivery(reopened, 1)),
        },
    )
    stored = {
        m: (tx, "committed" if record.ended[tx] == "commit" else "rolled_back")
        for m, tx in record.prepared.items()
    }
    seen = {g.group: g for g in judge(planted, stored, {}).groups}
    assert seen["billing"].unexpected == {reopened}
    assert seen["billing"].lost == {missed}
    assert not seen["shipping"].lost and not seen["shipping"].unexpected
