"""The barrier's check in a producer group's own database (its check source).

One small connection per check, closed when the check ends: check sources
are few and a check is rare (at most one per half message per check
interval), so a pool would only hold connections to the producers'
databases open for nothing. The connection goes to `addresses`, the
addresses the caller checked (libpq `hostaddr`, one attempt per address),
while `host` stays the name TLS verifies: a name that resolves elsewhere by
the time libpq would resolve it again (DNS rebinding) cannot redirect the
connection. `lock_timeout` and `statement_timeout` bound the wait on a local
transaction still holding the barrier key; the caller bounds the whole check
too.
"""

from __future__ import annotations

from psycopg import AsyncConnection, sql

from coordinator.db.queries import query


def _statement(name: str, table: str) -> sql.Composed:
    return sql.SQL(query(name)).format(table=sql.Identifier(*table.split(".")))


async def check_barrier(
    url: str,
    *,
    password: str | None,
    host: str,
    addresses: list[str],
    table: str,
    transaction_id: str,
    timeout_seconds: float,
) -> str | None:
    """Insert the `rolled_back` marker unless a row is there; the outcome that won.

    None when the table holds no row even after the insert (it cannot, but
    a trigger in the producer's database might drop it): read as rolled back.
    """
    milliseconds = max(1, int(timeout_seconds * 1000))
    conn = await AsyncConnection.connect(
        url,
        password=password,
        # one attempt per checked address, in order, each pinned to it
        host=",".join([host] * len(addresses)),
        hostaddr=",".join(addresses),
        # libpq's bound on reaching the server (whole seconds, at least 2)
        connect_timeout=max(2, round(timeout_seconds)),
        options=f"-c lock_timeout={milliseconds} -c statement_timeout={milliseconds}",
        application_name="coordinator-check",
    )
    async with conn:
        params = {"transaction_id": transaction_id}
        await conn.execute(_statement("barrier_insert_marker", table), params)
        cursor = await conn.execute(_statement("barrier_read_outcome", table), params)
        row = await cursor.fetchone()
        # leaving `async with` commits: the marker holds from now on
    return None if row is None else str(row[0])
