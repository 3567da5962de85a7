"""Each core counts with a meter of its own, each fact once, where the core decides it."""

from __future__ import annotations

import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import StateConflict
from tests.factories import end, half

pytestmark = pytest.mark.anyio

RESOLVED = "coordinator_transactions_resolved_total"
LATENCY_COUNT = "coordinator_resolution_latency_seconds_count"
ANSWERED = "coordinator_check_backs_answered_total"


def _sample(core: Coordinator, name: str, **labels: str) -> float | None:
    return core.meter.registry.get_sample_value(name, labels)


async def test_two_cores_on_one_database_do_not_share_counts(
    core: Coordinator, database_url: str, settings: Settings
) -> None:
    async with Coordinator.connect(database_url, settings) as other:
        committed = await core.transactions.prepare(half())
        await core.transactions.end(end(committed.transaction_id, "commit"))
        answered = await other.transactions.prepare(half())
        await other.transactions.end_batch(
            [end(answered.transaction_id, "rollback", from_check=True)]
        )

        assert _sample(core, RESOLVED, state="committed", source="client") == 1
        assert _sample(other, RESOLVED, state="committed", source="client") == 0
        assert _sample(other, RESOLVED, state="rolled_back", source="check") == 1
        assert _sample(core, RESOLVED, state="rolled_back", source="check") == 0
        assert _sample(other, ANSWERED, resolution="rollback") == 1
        assert _sample(core, ANSWERED, resolution="rollback") == 0


async def test_a_resolution_is_counted_and_timed_once_and_every_answer_once(
    core: Coordinator,
) -> None:
    sent = await core.transactions.prepare(half())
    await core.transactions.end(end(sent.transaction_id, "commit", from_check=True))
    # The same answer again changes nothing; the opposite one is refused.
    await core.transactions.end(end(sent.transaction_id, "commit", from_check=True))
    with pytest.raises(StateConflict):
        await core.transactions.end(end(sent.transaction_id, "rollback", from_check=True))
    await core.transactions.end(end(sent.transaction_id, "unknown", from_check=True))

    assert _sample(core, RESOLVED, state="committed", source="check") == 1
    assert _sample(core, LATENCY_COUNT, state="committed", source="check") == 1
    # The producer answered four times, whatever each answer changed.
    assert _sample(core, ANSWERED, resolution="commit") == 2
    assert _sample(core, ANSWERED, resolution="rollback") == 1
    assert _sample(core, ANSWERED, resolution="unknown") == 1
