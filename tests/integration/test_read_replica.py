"""read_database_url: the overview reads a streaming standby; writes stay on the primary.

A real primary and a real hot standby of it (tests/streaming_standby.py);
the standby lags on demand, its replay paused while the primary commits.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from coordinator.core import Coordinator
from tests.factories import half
from tests.overview_data import ORDER_SVC, overview_settings
from tests.streaming_standby import StreamingStandby, streaming_standby

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingStandby]:
    with streaming_standby() as started:
        yield started


@pytest.fixture
def urls(pair: StreamingStandby) -> Iterator[tuple[str, str]]:
    """A migrated database of this test's own: its primary URL and its standby URL."""
    name = f"read_{uuid.uuid4().hex[:12]}"
    primary = pair.migrated_database(name)
    yield primary, pair.standby_url(name)
    pair.resume_replay()  # whatever the test left paused


def _one(url: str, statement: str, params: tuple[object, ...] = ()) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    return row[0]


async def test_the_overview_reads_the_standby_and_writes_go_to_the_primary(
    pair: StreamingStandby, urls: tuple[str, str]
) -> None:
    primary, standby = urls
    settings = overview_settings(read_database_url=standby)
    async with Coordinator.connect(primary, settings) as core:
        assert core.read_pool is not None
        async with core.read_pool.connection() as conn:
            assert await (await conn.execute("SELECT pg_is_in_recovery()")).fetchone() == {
                "pg_is_in_recovery": True
            }
        await core.transactions.prepare(half(producer_group=ORDER_SVC))
        pair.wait_for_replay()
        assert (await core.overview.read()).pending == 1

        pair.pause_replay()
        # A standby refuses writes: this one went to the primary, and is stored there.
        sent = await core.transactions.prepare(half(producer_group=ORDER_SVC))
        assert _one(primary, "SELECT state FROM messages WHERE id = %s", (sent.offset,)) == (
            "prepared"
        )
        # The overview still shows what the standby has replayed.
        assert (await core.overview.read()).pending == 1

        pair.resume_replay()
        pair.wait_for_replay()
        assert (await core.overview.read()).pending == 2


async def test_without_a_read_url_the_overview_reads_the_primary(
    pair: StreamingStandby, urls: tuple[str, str]
) -> None:
    primary, _ = urls
    async with Coordinator.connect(primary, overview_settings()) as core:
        assert core.read_pool is None
        pair.pause_replay()
        await core.transactions.prepare(half(producer_group=ORDER_SVC))
        assert (await core.overview.read()).pending == 1
