"""The overview's storage part against what the database holds, after a retention round
and before any."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.views.overview import OverviewOut
from tests.overview_data import (
    BILLING,
    RETENTION_OVERRIDES,
    STORED_TABLES,
    age_for_retention,
    expected_storage,
    overview_settings,
    seed,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings() -> Settings:
    return overview_settings(**RETENTION_OVERRIDES)


@pytest.fixture
async def aged(core: Coordinator, db: psycopg.Connection) -> AsyncIterator[Coordinator]:
    await seed(core, db)
    # The seed's receives went through this core: forgotten, as on a node that served none.
    core.delivery.take_received_groups()
    age_for_retention(db)
    yield core


async def test_after_a_round_the_storage_shows_tables_idle_groups_and_the_round(
    aged: Coordinator, db: psycopg.Connection
) -> None:
    result = await aged.retention.run_round()
    assert result.removed["dead_letters"] == 1
    for table in STORED_TABLES:
        db.execute(f"ANALYZE {table}")  # the estimates after the round's delete

    storage = (await aged.overview.read(minutes=1)).storage
    expected = expected_storage(db)

    assert storage is not None
    by_name = {t.table: t for t in storage.tables}
    assert list(by_name) == list(STORED_TABLES)
    for name, figures in expected["tables"].items():
        seen = by_name[name]
        assert (seen.bytes, seen.rows) == (figures["bytes"], figures["rows"]), name
        if figures["oldest_age_seconds"] is None:
            assert seen.oldest_age_seconds is None, name
        else:  # read a moment apart
            assert seen.oldest_age_seconds == pytest.approx(figures["oldest_age_seconds"], abs=30)
    assert by_name["dead_letters"].rows == 0 and by_name["dead_letters"].oldest_age_seconds is None
    assert by_name["messages"].rows > 0

    (idle,) = storage.idle_consumer_groups
    assert (idle.consumer_group, idle.pending) == (BILLING, expected["billing_pending"])
    assert idle.pending > 0

    assert storage.retention_enabled
    assert storage.last_round is result

    body = OverviewOut.of(await aged.overview.read(minutes=1)).model_dump(mode="json")
    last = body["storage"]["last_round"]
    assert last["removed"] == {
        "messages": 0,
        "unacked_deliveries": 0,
        "dead_letters": 1,
        "consumer_groups": 0,
    }
    assert last["dead_letters_by_group"] == {BILLING: 1}
    assert last["duration_seconds"] >= 0 and last["started_at"] is not None
    assert [t["table"] for t in body["storage"]["tables"]] == list(STORED_TABLES)


async def test_before_any_round_the_storage_says_none_was_run(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = overview_settings(retention_enabled=False)
    async with Coordinator.connect(database_url, settings) as core:
        overview = await core.overview.read(minutes=1)
        body = OverviewOut.of(overview).model_dump(mode="json")
        # /metrics reads the overview without its storage (the rounds set those gauges).
        assert (await core.overview.read(minutes=0, storage=False)).storage is None
    assert body["storage"]["last_round"] is None
    assert body["storage"]["retention_enabled"] is False
    assert body["storage"]["idle_consumer_groups"] == []
    empty = {t["table"]: t["oldest_age_seconds"] for t in body["storage"]["tables"]}
    assert empty == dict.fromkeys(STORED_TABLES)
