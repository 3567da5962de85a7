"""The overview's figures against what the database holds."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core import overview as overview_module
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.states import CheckStatus, Resolution
from tests.factories import end, half
from tests.overview_data import (
    BILLING,
    ORDER_SVC,
    ORDERS,
    PAYMENT_SVC,
    expected_figures,
    overview_settings,
    seed,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings() -> Settings:
    return overview_settings()


@pytest.fixture
async def seeded(core: Coordinator, db: psycopg.Connection) -> AsyncIterator[Coordinator]:
    await seed(core, db)
    yield core


async def test_an_empty_database_has_an_empty_overview(core: Coordinator) -> None:
    seen = await core.overview.read(minutes=5)
    assert seen.pending == 0 and seen.oldest == () and seen.oldest_age is None
    assert [b.messages for b in seen.age_buckets] == [0] * 6
    assert len(seen.minutes) == 5 and all(m.committed == 0 for m in seen.minutes)
    assert seen.consumers == () and seen.producers == () and seen.check_backs == ()


async def test_the_figures_are_those_of_the_database(
    seeded: Coordinator, db: psycopg.Connection
) -> None:
    seen = await seeded.overview.read()
    expected = expected_figures(db)

    assert seen.pending == expected["pending"] == 8
    assert [b.messages for b in seen.age_buckets] == expected["by_bucket"]
    assert {g.producer_group: g.pending for g in seen.pending_groups} == expected[
        "pending_by_group"
    ]
    assert seen.oldest[0].transaction_id == expected["oldest_transaction_id"]
    assert [m.age for m in seen.oldest] == sorted((m.age for m in seen.oldest), reverse=True)
    assert seen.oldest[0].check_count == expected["oldest_check_count"] == 1
    assert seen.oldest[0].check_status is CheckStatus.DELIVERED

    # Everything was resolved seconds ago: the window holds all of it.
    assert len(seen.minutes) == overview_module.DEFAULT_MINUTES
    for state in ("committed", "rolled_back", "discarded", "expired"):
        assert sum(getattr(m, state) for m in seen.minutes) == expected[state], state
    assert (expected["committed"], expected["rolled_back"]) == (3, 1)
    assert (expected["discarded"], expected["expired"]) == (1, 1)

    (billing,) = [c for c in seen.consumers if c.consumer_group == BILLING]
    assert (billing.topic, billing.lag, billing.in_flight, billing.dead_letters) == (
        ORDERS,
        expected["lag"],
        expected["in_flight"],
        expected["dead_letters"],
    )
    assert (billing.lag, billing.in_flight, billing.dead_letters) == (2, 1, 1)
    assert not billing.lag_capped and not billing.dead_letters_capped

    assert {p.producer_group: p.live for p in seen.producers} == expected["live"] == {ORDER_SVC: 1}
    checks = {c.producer_group: c for c in seen.check_backs}
    assert checks[ORDER_SVC].delivered == expected["check_statuses"]["delivered"] == 2
    assert checks[ORDER_SVC].live_producers == 1
    assert checks[PAYMENT_SVC].no_producer == expected["check_statuses"]["no_producer"] == 1
    assert checks[PAYMENT_SVC].live_producers == 0
    assert checks[PAYMENT_SVC].pending == 2


async def test_a_resolution_shows_in_the_current_minute(seeded: Coordinator) -> None:
    before = await seeded.overview.read()
    oldest = before.oldest[-1]
    await seeded.transactions.end(
        end(oldest.transaction_id, Resolution.COMMIT, group=oldest.producer_group)
    )
    after = await seeded.overview.read()
    assert after.pending == before.pending - 1
    assert sum(m.committed for m in after.minutes) == sum(m.committed for m in before.minutes) + 1


async def test_complete_minutes_are_read_once(core: Coordinator, db: psycopg.Connection) -> None:
    """A minute that ended is kept in memory: later reads look at the last minutes only."""
    sent = await core.transactions.prepare(half(producer_group=ORDER_SVC))
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, group=ORDER_SVC))
    db.execute(
        "UPDATE messages SET resolved_at = now() - interval '5 minutes' WHERE id = %s",
        (sent.offset,),
    )
    first = await core.overview.read(minutes=10)
    assert sum(m.committed for m in first.minutes) == 1
    # Rows changed in a complete minute after it was read are not read again.
    db.execute(
        "UPDATE messages SET resolved_at = now() - interval '8 minutes' WHERE id = %s",
        (sent.offset,),
    )
    second = await core.overview.read(minutes=10)
    assert [m.committed for m in second.minutes] == [m.committed for m in first.minutes]


async def test_counts_stop_at_the_limit_and_say_so(
    seeded: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_module, "COUNT_LIMIT", 1)
    (billing,) = [
        c for c in (await seeded.overview.read()).consumers if c.consumer_group == BILLING
    ]
    assert (billing.lag, billing.lag_capped) == (1, True)
    assert (billing.dead_letters, billing.dead_letters_capped) == (1, True)


@pytest.mark.parametrize("minutes", [-1, overview_module.MAX_MINUTES + 1])
async def test_a_window_out_of_bounds_is_refused(core: Coordinator, minutes: int) -> None:
    with pytest.raises(InvalidMessage, match="minutes must be between 0 and 120"):
        await core.overview.read(minutes=minutes)


async def test_without_minutes_no_resolution_is_read(seeded: Coordinator) -> None:
    seen = await seeded.overview.read(minutes=0)
    assert seen.minutes == () and seen.pending == 8
