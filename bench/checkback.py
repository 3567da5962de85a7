"""Check-back claim and dispatch with a backlog of due half messages.

The table also holds many resolved messages (1M, then 10x more): the claim
reads the partial index of prepared messages only, so its cost should follow
the backlog, not the table.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from coordinator.config import Settings
from coordinator.core import Coordinator

GROUP = "bench-check-producers"
INSTANCE = "bench-instance"
CHUNK = 250_000


@dataclass(frozen=True)
class ClaimResult:
    resolved_rows: int
    backlog: int
    claim_seconds: float
    claim_batches: int
    poll_seconds: float

    @property
    def claimed_per_second(self) -> float:
        return self.backlog / self.claim_seconds

    @property
    def dispatched_per_second(self) -> float:
        return self.backlog / (self.claim_seconds + self.poll_seconds)

    @property
    def ms_per_batch(self) -> float:
        return self.claim_seconds / self.claim_batches * 1000


def grow_resolved(url: str, total: int, progress: Callable[[int], None]) -> None:
    """Fill the table with resolved (committed) messages up to `total` rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        (have,) = conn.execute(
            "SELECT count(*) FROM messages WHERE topic = 'bench-resolved'"
        ).fetchone()
        while have < total:
            upto = min(total, have + CHUNK)
            conn.execute(
                """
                INSERT INTO messages (message_id, kind, topic, body, state, born_at,
                                      resolved_at, resolution_source)
                SELECT 'RESOLVED-' || g, 'normal', 'bench-resolved', '\\x6f6b'::bytea,
                       'committed', now() - interval '1 hour', now() - interval '1 hour', 'client'
                FROM generate_series(%s::bigint, %s::bigint) AS g
                """,
                (have + 1, upto),
            )
            have = upto
            progress(have)
        conn.execute("VACUUM ANALYZE messages")


def _add_backlog(url: str, backlog: int, round_no: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,
                                  state, born_at, next_check_at)
            SELECT 'DUE-' || %(round)s || '-' || g, 'due-' || %(round)s || '-' || g,
                   'transactional', %(group)s, 'bench-checks', '\\x6f6b'::bytea, 'prepared',
                   now() - interval '1 minute', now() - interval '1 second'
            FROM generate_series(1, %(backlog)s) AS g
            """,
            {"round": round_no, "group": GROUP, "backlog": backlog},
        )
        conn.execute("ANALYZE messages")


def _resolve_backlog(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE messages SET state = 'rolled_back', resolved_at = now(), "
            "resolution_source = 'operator', next_check_at = NULL "
            "WHERE producer_group = %s AND state = 'prepared'",
            (GROUP,),
        )


async def _claim_all(url: str, backlog: int, batch_size: int) -> tuple[float, int, float]:
    settings = Settings(check_batch_size=batch_size)
    async with Coordinator.connect(url, settings) as core:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE)
        claimed = batches = 0
        start = time.perf_counter()
        while claimed < backlog:
            got = await core.checkback.rounds.claim()
            if not got:
                raise RuntimeError(f"claimed {claimed} of {backlog}, then nothing")
            claimed += len(got)
            batches += 1
        claim_seconds = time.perf_counter() - start
        # Dispatch (pull): the instance takes its requests with its long poll.
        taken = 0
        start = time.perf_counter()
        while taken < backlog:
            requests = await core.checkback.pull.poll(GROUP, INSTANCE, max_requests=1000)
            if not requests:
                raise RuntimeError(f"polled {taken} of {backlog} check requests, then nothing")
            taken += len(requests)
        poll_seconds = time.perf_counter() - start
    return claim_seconds, batches, poll_seconds


def run_claim(
    url: str, *, resolved_rows: int, backlog: int, batch_size: int, round_no: int
) -> ClaimResult:
    _add_backlog(url, backlog, round_no)
    claim_seconds, batches, poll_seconds = asyncio.run(_claim_all(url, backlog, batch_size))
    _resolve_backlog(url)
    return ClaimResult(resolved_rows, backlog, claim_seconds, batches, poll_seconds)
