"""The core's connections plan each statement for the tables as they are now."""

from __future__ import annotations

import pytest

from coordinator.core import Coordinator

pytestmark = pytest.mark.anyio


async def test_pool_connections_never_reuse_stale_generic_plans(core: Coordinator) -> None:
    # A generic plan cached while a table was small stays until the next
    # ANALYZE; see coordinator/core/database.py for what that cost.
    async with core.pool.connection() as conn:
        cursor = await conn.execute("SHOW plan_cache_mode")
        assert await cursor.fetchone() == {"plan_cache_mode": "force_custom_plan"}
