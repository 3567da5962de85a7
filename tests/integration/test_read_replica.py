"""read_database_url: the overview reads a streaming standby; writes stay on the primary.

A real primary and a real hot standby of it (tests/streaming_standby.py);
the standby lags on demand, its replay paused while the primary commits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.core import overview as overview_module
from coordinator.db.queries import query
from coordinator.domain.overview import Overview
from coordinator.domain.states import Resolution
from tests.factories import end, half
from tests.overview_data import ORDER_SVC, overview_settings
from tests.streaming_standby import StreamingStandby, database_on_both, streaming_standby

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingStandby]:
    with streaming_standby() as started:
        yield started


@pytest.fixture
def urls(pair: StreamingStandby) -> Iterator[tuple[str, str]]:
    """A migrated database of this test's own: its primary URL and its standby URL."""
    with database_on_both(pair, "read") as both:
        yield both


IN_MINUTE = "UPDATE messages SET resolved_at = %s WHERE id = ANY(%s)"


def _one(url: str, statement: str, params: tuple[object, ...] = ()) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    return row[0]


def _run(url: str, statement: str, params: tuple[object, ...]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement, params)


def _committed(overview: Overview, minute: datetime) -> int:
    (counts,) = [m for m in overview.minutes if m.minute == minute]
    return counts.committed


async def _resolve(core: Coordinator, count: int) -> list[int]:
    offsets = []
    for _ in range(count):
        sent = await core.transactions.prepare(half(producer_group=ORDER_SVC))
        await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, group=ORDER_SVC))
        offsets.append(sent.offset)
    return offsets


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


async def test_a_minute_the_standby_has_not_replayed_is_not_kept(
    pair: StreamingStandby, urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    primary, standby = urls
    settings = overview_settings(read_database_url=standby)
    async with Coordinator.connect(primary, settings) as core:
        pair.pause_replay()
        replayed: datetime = _one(standby, "SELECT pg_last_xact_replay_timestamp()")  # type: ignore[assignment]
        # A minute that, by the rule, ends its settling 2 s after the last commit the
        # standby replayed (SETTLE, normally 15 s, is set so: the test waits seconds,
        # not up to two minutes).
        minute = replayed.replace(second=0, microsecond=0) - timedelta(minutes=1)
        settle = replayed + timedelta(seconds=2) - (minute + overview_module.MINUTE)
        monkeypatch.setattr(overview_module, "SETTLE", settle)

        # Resolutions of that minute committed on the primary once the standby paused
        # (as by transactions that started in it and committed a little later).
        offsets = await _resolve(core, 3)
        _run(primary, IN_MINUTE, (minute + timedelta(seconds=30), offsets))
        pair.wait_for_receipt()
        # Received, not replayed: the standby holds every commit up to its last
        # replayed one, and no further.
        assert _one(standby, query("data_complete_until")) == replayed
        while time.time() < (minute + overview_module.MINUTE + settle).timestamp() + 0.5:
            await asyncio.sleep(0.1)

        lagging = await core.overview.read(minutes=5)
        # By the standby's clock the minute has settled: kept now, it would stay
        # without these resolutions for as long as the process runs.
        assert minute + overview_module.MINUTE + settle <= lagging.at
        assert _committed(lagging, minute) == 0

        pair.resume_replay()
        # A commit of the primary after the minute settled: once the standby has it,
        # it holds every commit up to there, still receiving or not.
        await core.transactions.prepare(half(producer_group=ORDER_SVC))
        pair.wait_for_replay()
        assert _committed(await core.overview.read(minutes=5), minute) == 3

        # Complete now on the standby too, so kept: a change of it is not read again.
        _run(primary, IN_MINUTE, (minute - timedelta(hours=1), offsets))
        pair.wait_for_replay()
        assert _committed(await core.overview.read(minutes=5), minute) == 3


def test_a_primary_is_complete_up_to_its_clock(urls: tuple[str, str]) -> None:
    primary, _ = urls
    with psycopg.connect(primary, autocommit=True) as conn:
        conn.execute("BEGIN")
        now, complete = conn.execute(f"SELECT now(), ({query('data_complete_until')})").fetchone()  # type: ignore[misc]
        conn.execute("COMMIT")
    assert complete == now
