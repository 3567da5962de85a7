"""Commit, rollback and unknown: compare-and-set transitions, each recorded."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.domain.errors import NotFound, ProducerGroupMismatch, StateConflict
from coordinator.domain.states import MessageState, Resolution
from tests.factories import end, half

pytestmark = pytest.mark.anyio


def _state(db: psycopg.Connection, offset: int) -> tuple:
    return db.execute(
        "SELECT state, resolution_source, resolved_at IS NOT NULL, next_check_at "
        "FROM messages WHERE id = %s",
        (offset,),
    ).fetchone()


def _history(db: psycopg.Connection, offset: int) -> list[tuple]:
    return db.execute(
        "SELECT source, from_state, to_state FROM message_history "
        "WHERE message_offset = %s ORDER BY id",
        (offset,),
    ).fetchall()


@pytest.mark.parametrize(
    ("resolution", "state"),
    [(Resolution.COMMIT, "committed"), (Resolution.ROLLBACK, "rolled_back")],
)
async def test_commit_and_rollback_resolve_a_prepared_message(
    core: Coordinator, db: psycopg.Connection, resolution: Resolution, state: str
) -> None:
    sent = await core.transactions.prepare(half())
    result = await core.transactions.end(end(sent.transaction_id, resolution))

    assert result.changed is True and result.state.value == state
    assert result.offset == sent.offset and result.message_id == sent.message_id
    assert _state(db, sent.offset) == (state, "client", True, None)
    assert _history(db, sent.offset) == [
        ("client", None, "prepared"),
        ("client", "prepared", state),
    ]


async def test_unknown_changes_nothing(core: Coordinator, db: psycopg.Connection) -> None:
    sent = await core.transactions.prepare(half())
    before = _state(db, sent.offset)
    result = await core.transactions.end(end(sent.transaction_id, Resolution.UNKNOWN))

    assert result.changed is False and result.state is MessageState.PREPARED
    assert _state(db, sent.offset) == before
    assert len(_history(db, sent.offset)) == 1


async def test_an_answer_to_a_check_back_is_recorded_as_such(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    await core.transactions.end(end(sent.transaction_id, Resolution.ROLLBACK, from_check=True))
    assert _state(db, sent.offset)[:2] == ("rolled_back", "check")
    assert _history(db, sent.offset)[-1] == ("check", "prepared", "rolled_back")


@pytest.mark.parametrize("resolution", [Resolution.COMMIT, Resolution.ROLLBACK])
async def test_repeating_a_resolution_is_an_idempotent_success(
    core: Coordinator, db: psycopg.Connection, resolution: Resolution
) -> None:
    """RocketMQ #5574: a duplicate END_TRANSACTION must not make a second copy."""
    sent = await core.transactions.prepare(half())
    first = await core.transactions.end(end(sent.transaction_id, resolution))
    again = await core.transactions.end(end(sent.transaction_id, resolution, from_check=True))

    assert first.changed is True and again.changed is False
    assert again.state is first.state
    assert len(_history(db, sent.offset)) == 2
    assert _state(db, sent.offset)[1] == "client"  # the first resolution stands


@pytest.mark.parametrize(
    ("first", "second", "stays"),
    [
        (Resolution.ROLLBACK, Resolution.COMMIT, "rolled_back"),
        (Resolution.COMMIT, Resolution.ROLLBACK, "committed"),
    ],
)
async def test_the_opposite_resolution_is_refused(
    core: Coordinator,
    db: psycopg.Connection,
    first: Resolution,
    second: Resolution,
    stays: str,
) -> None:
    """RocketMQ #8158: a commit after a (check-back) rollback must never land."""
    sent = await core.transactions.prepare(half())
    await core.transactions.end(end(sent.transaction_id, first, from_check=True))
    with pytest.raises(StateConflict) as refused:
        await core.transactions.end(end(sent.transaction_id, second))
    assert refused.value.current_state == stays
    assert _state(db, sent.offset)[0] == stays
    assert len(_history(db, sent.offset)) == 2


async def test_another_producer_group_is_refused(core: Coordinator, db: psycopg.Connection) -> None:
    sent = await core.transactions.prepare(half())
    for resolution in Resolution:
        with pytest.raises(ProducerGroupMismatch):
            await core.transactions.end(end(sent.transaction_id, resolution, group="someone-else"))
    assert _state(db, sent.offset)[0] == "prepared"
    # also once resolved: a wrong group never gets a success answer
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    with pytest.raises(ProducerGroupMismatch):
        await core.transactions.end(
            end(sent.transaction_id, Resolution.COMMIT, group="someone-else")
        )


async def test_unknown_transactions_and_mismatched_message_ids_are_not_found(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    for resolution in Resolution:
        with pytest.raises(NotFound):
            await core.transactions.end(end("0" * 32, resolution))
        with pytest.raises(NotFound):
            await core.transactions.end(
                end(sent.transaction_id, resolution, message_id="NOT-THIS-ONE")
            )
    assert _state(db, sent.offset)[0] == "prepared"
    ok = await core.transactions.end(
        end(sent.transaction_id, Resolution.COMMIT, message_id=sent.message_id)
    )
    assert ok.changed


async def test_normal_messages_have_no_transaction_to_end(core: Coordinator) -> None:
    sent = await core.transactions.send(half())
    with pytest.raises(NotFound):
        await core.transactions.end(end(sent.message_id, Resolution.ROLLBACK))


async def test_racing_commit_and_rollback_resolve_each_message_exactly_once(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare_batch([half(body=f"m{i}".encode()) for i in range(30)])

    async def attempt(transaction_id: str, resolution: Resolution) -> str:
        try:
            result = await core.transactions.end(end(transaction_id, resolution))
            return "won" if result.changed else "repeat"
        except StateConflict:
            return "refused"

    outcomes = await asyncio.gather(
        *(
            attempt(s.transaction_id, resolution)
            for s in sent
            for resolution in (Resolution.COMMIT, Resolution.ROLLBACK, Resolution.COMMIT)
        )
    )
    for i, s in enumerate(sent):
        mine = outcomes[i * 3 : i * 3 + 3]
        assert mine.count("won") == 1, mine
        state = _state(db, s.offset)[0]
        assert state in ("committed", "rolled_back")
        # exactly one resolution recorded, whatever the interleaving
        assert [h[2] for h in _history(db, s.offset)] == ["prepared", state]
