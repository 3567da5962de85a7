"""The SQL docs/check-back.md offers for watching check-backs runs on a real database."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import psycopg

from coordinator.core import Coordinator
from tests.checkback_helpers import INSTANCE, check_settings, make_due
from tests.factories import GROUP, half

CHECK_BACK_DOC = Path(__file__).resolve().parents[2] / "docs" / "check-back.md"


def _documented_queries() -> list[str]:
    section = CHECK_BACK_DOC.read_text().split("## SQL to watch check-backs", 1)[1]
    (block,) = re.findall(r"```sql\n(.*?)```", section, re.DOTALL)[:1]
    return [q.strip() for q in block.split(";") if q.strip()]


def test_the_documented_queries_run(database_url: str, db: psycopg.Connection) -> None:
    async def seed() -> None:
        async with Coordinator.connect(database_url, check_settings(check_max=1)) as core:
            await core.checkback.producers.heartbeat(GROUP, INSTANCE)
            sent = await core.transactions.prepare_batch(
                [half(body=f"m{i}".encode()) for i in range(3)]
            )
            make_due(db, *(s.offset for s in sent))
            await core.checkback.rounds.run_round()
            make_due(db, sent[0].offset)
            await core.checkback.rounds.run_round()  # discarded

    asyncio.run(seed())
    queries = _documented_queries()
    assert len(queries) >= 5
    results = [db.execute(q).fetchall() for q in queries]  # each one is valid SQL
    assert results[0] and results[1] and results[-1]  # the registry, checks, discards
