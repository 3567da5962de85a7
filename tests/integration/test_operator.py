"""Operator actions: re-arm a discarded message, or commit / roll back by hand."""

from __future__ import annotations

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import NotFound, StateConflict
from coordinator.domain.messages import SendResult
from coordinator.domain.states import MessageState, Resolution
from tests.checkback_helpers import INSTANCE, check_settings, history, make_due, message
from tests.factories import GROUP, end, half

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings() -> Settings:
    return check_settings(check_max=1)


async def _discarded(core: Coordinator, db: psycopg.Connection) -> SendResult:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    for _ in range(2):  # check_max = 1: one check, then discarded
        make_due(db, sent.offset)
        await core.checkback.rounds.run_round()
    assert message(db, sent.offset)["state"] == "discarded"
    return sent


async def test_recheck_re_arms_a_discarded_message(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await _discarded(core, db)
    result = await core.checkback.operator.recheck(sent.offset)
    assert (result.previous_state, result.state, result.changed) == (
        MessageState.DISCARDED,
        MessageState.PREPARED,
        True,
    )
    row = message(db, sent.offset)
    assert (row["state"], row["check_count"], row["resolved_at"], row["resolution_source"]) == (
        "prepared",
        0,
        None,
        None,
    )
    assert history(db, sent.offset)[-1] == (
        "operator",
        "discarded",
        "prepared",
        "re-armed: check count reset, checked back now",
    )
    # due at once, with a fresh budget
    result = await core.checkback.rounds.run_round()
    assert [c.offset for c in result.checked] == [sent.offset]
    (request,) = await core.checkback.pull.poll(GROUP, INSTANCE)
    assert request.check_count == 1
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, from_check=True))
    assert message(db, sent.offset)["state"] == "committed"


@pytest.mark.parametrize(
    ("resolution", "state"),
    [(Resolution.COMMIT, "committed"), (Resolution.ROLLBACK, "rolled_back")],
)
async def test_an_operator_resolves_a_discarded_message(
    core: Coordinator, db: psycopg.Connection, resolution: Resolution, state: str
) -> None:
    sent = await _discarded(core, db)
    result = await core.checkback.operator.resolve(sent.offset, resolution)
    assert result.changed and result.state.value == state
    row = message(db, sent.offset)
    assert (row["state"], row["resolution_source"]) == (state, "operator")
    assert row["resolved_at"] is not None
    assert history(db, sent.offset)[-1] == ("operator", "discarded", state, "resolved by hand")


async def test_an_operator_resolves_a_prepared_message(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    await core.checkback.operator.resolve(sent.offset, Resolution.COMMIT)
    assert message(db, sent.offset)["state"] == "committed"
    assert history(db, sent.offset)[-1][:3] == ("operator", "prepared", "committed")
    # the producer's late answer is an idempotent repeat
    late = await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, from_check=True))
    assert late.changed is False


async def test_operator_actions_refuse_what_does_not_fit(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    with pytest.raises(StateConflict, match="only a discarded message can be re-armed"):
        await core.checkback.operator.recheck(sent.offset)

    await core.transactions.end(end(sent.transaction_id, Resolution.ROLLBACK))
    again = await core.checkback.operator.resolve(sent.offset, Resolution.ROLLBACK)
    assert again.changed is False and again.state is MessageState.ROLLED_BACK
    with pytest.raises(StateConflict, match="already rolled_back; it cannot be committed") as e:
        await core.checkback.operator.resolve(sent.offset, Resolution.COMMIT)
    assert e.value.current_state == "rolled_back"
    assert len(history(db, sent.offset)) == 2

    with pytest.raises(NotFound):
        await core.checkback.operator.recheck(987654)
    with pytest.raises(NotFound):
        await core.checkback.operator.resolve(987654, Resolution.COMMIT)


async def test_a_discarded_message_past_retention_cannot_be_re_armed(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await _discarded(core, db)
    db.execute(
        "UPDATE messages SET born_at = now() - interval '73 hours' WHERE id = %s", (sent.offset,)
    )
    with pytest.raises(StateConflict, match="would expire at once"):
        await core.checkback.operator.recheck(sent.offset)
    await core.checkback.operator.resolve(sent.offset, Resolution.ROLLBACK)  # the way out
    assert message(db, sent.offset)["state"] == "rolled_back"
