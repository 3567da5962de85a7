"""Group commit: concurrent single requests share transactions, answers stay individual."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.core.group_commit import CommitSlots, GroupCommitter
from coordinator.domain.errors import InvalidMessage, MessageIdConflict, StateConflict
from coordinator.domain.states import Resolution
from tests.factories import end, half

pytestmark = pytest.mark.anyio


async def test_concurrent_prepares_share_transactions_and_each_gets_its_own_answer(
    core: Coordinator, db: psycopg.Connection
) -> None:
    results = await asyncio.gather(
        *(core.transactions.prepare(half(body=f"m{i}".encode())) for i in range(200))
    )

    assert len({r.offset for r in results}) == 200
    stored = dict(db.execute("SELECT id, body FROM messages").fetchall())
    assert all(stored[r.offset] == f"m{i}".encode() for i, r in enumerate(results))
    assert core.transactions._prepares.items == 200
    assert core.transactions._prepares.batches < 200  # requests were coalesced


async def test_answers_come_after_the_commit(core: Coordinator, database_url: str) -> None:
    async def prepare_and_look() -> bool:
        sent = await core.transactions.prepare(half())
        with psycopg.connect(database_url) as other:  # another session sees it at once
            row = other.execute("SELECT state FROM messages WHERE id = %s", (sent.offset,))
            return row.fetchone() == ("prepared",)

    assert all(await asyncio.gather(*(prepare_and_look() for _ in range(20))))


async def test_a_conflicting_request_fails_alone(core: Coordinator, db: psycopg.Connection) -> None:
    await core.transactions.prepare(half(message_id="TAKEN"))
    outcomes = await asyncio.gather(
        *(core.transactions.prepare(half(body=f"ok{i}".encode())) for i in range(10)),
        core.transactions.prepare(half(body=b"different", message_id="TAKEN")),
        return_exceptions=True,
    )
    assert isinstance(outcomes[-1], MessageIdConflict)
    assert not any(isinstance(o, Exception) for o in outcomes[:-1])
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (11,)


async def test_invalid_requests_never_reach_a_batch(core: Coordinator) -> None:
    with pytest.raises(InvalidMessage):
        await core.transactions.prepare(half(topic="bad topic"))
    assert core.transactions._prepares.items == 0


async def test_ends_of_the_same_transaction_never_share_a_statement(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    outcomes = await asyncio.gather(
        *(
            core.transactions.end(end(sent.transaction_id, r))
            for r in [Resolution.COMMIT, Resolution.ROLLBACK] * 5
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if not isinstance(o, Exception) and o.changed]
    assert len(winners) == 1
    final = winners[0].state.value
    for outcome in outcomes:
        if isinstance(outcome, StateConflict):
            assert outcome.current_state == final
    assert db.execute(
        "SELECT count(*) FROM message_history WHERE message_offset = %s", (sent.offset,)
    ).fetchone() == (2,)


async def test_a_failing_batch_is_retried_one_request_at_a_time(core: Coordinator) -> None:
    async def run(conn, items: list[str]) -> list[str]:
        await conn.execute("SELECT 1")
        if "poison" in items and len(items) > 1:
            raise RuntimeError("the whole statement failed")
        if items == ["poison"]:
            raise RuntimeError("poison fails on its own too")
        return [item.upper() for item in items]

    committer: GroupCommitter[str, str] = GroupCommitter(
        core.pool, run, max_batch=50, max_inflight=1
    )
    outcomes = await asyncio.gather(
        *(committer.submit(item) for item in ["a", "b", "poison", "c", "d"]),
        return_exceptions=True,
    )
    assert outcomes[:2] == ["A", "B"] and outcomes[3:] == ["C", "D"]
    assert isinstance(outcomes[2], RuntimeError)


async def test_kinds_sharing_slots_take_turns_and_gather_while_the_other_commits(
    core: Coordinator,
) -> None:
    first_may_commit = asyncio.Event()

    async def held(conn, items: list[str]) -> list[str]:
        await conn.execute("SELECT 1")
        await first_may_commit.wait()
        return [item.upper() for item in items]

    async def run(conn, items: list[str]) -> list[str]:
        await conn.execute("SELECT 1")
        return [item.upper() for item in items]

    slots = CommitSlots(1)
    prepares: GroupCommitter[str, str] = GroupCommitter(core.pool, held, max_batch=50, slots=slots)
    ends: GroupCommitter[str, str] = GroupCommitter(core.pool, run, max_batch=50, slots=slots)
    first = asyncio.create_task(prepares.submit("p"))
    waiting = [asyncio.create_task(ends.submit(item)) for item in ["a", "b", "c"]]
    for _ in range(20):  # bounded: let every task reach its committer
        await asyncio.sleep(0)
    assert ends.batches == 0  # the one slot is the prepares' batch's

    first_may_commit.set()
    assert await first == "P"
    assert await asyncio.gather(*waiting) == ["A", "B", "C"]
    assert (ends.batches, ends.items) == (1, 3)  # gathered while the other kind committed


async def test_under_concurrent_load_a_batch_gathers_as_many_as_the_last_one_held(
    core: Coordinator,
) -> None:
    may_commit = asyncio.Event()

    async def run(conn, items: list[str]) -> list[str]:
        await conn.execute("SELECT 1")
        if "held" in items:
            await may_commit.wait()
        return [item.upper() for item in items]

    committer: GroupCommitter[str, str] = GroupCommitter(
        core.pool, run, max_batch=50, linger_seconds=30.0
    )

    async def settle() -> None:
        for _ in range(50):  # bounded: let every task reach the committer
            await asyncio.sleep(0)

    # A batch of three: they queued while a held batch committed.
    held = asyncio.create_task(committer.submit("held"))
    three = [asyncio.create_task(committer.submit(item)) for item in "abc"]
    await settle()
    may_commit.set()
    assert await held == "HELD" and await asyncio.gather(*three) == ["A", "B", "C"]
    assert (committer.batches, committer.items) == (2, 4)

    # The next waits (within the linger) until three are there, then goes as one batch.
    first = asyncio.create_task(committer.submit("d"))
    await settle()
    assert committer.batches == 2 and not first.done()
    rest = [asyncio.create_task(committer.submit(item)) for item in "ef"]
    async with asyncio.timeout(10):
        assert await asyncio.gather(first, *rest) == ["D", "E", "F"]
    assert (committer.batches, committer.items) == (3, 7)


async def test_a_lone_caller_never_waits_for_the_linger(core: Coordinator) -> None:
    async def run(conn, items: list[str]) -> list[str]:
        await conn.execute("SELECT 1")
        return [item.upper() for item in items]

    committer: GroupCommitter[str, str] = GroupCommitter(
        core.pool, run, max_batch=50, linger_seconds=30.0
    )
    async with asyncio.timeout(10):  # each would take 30 s if it waited
        for item in "abcde":
            assert await committer.submit(item) == item.upper()
    assert committer.batches == 5
