"""The overview is cheap on a large database: no statement of it scans a big table.

The tables are filled the way a busy coordinator's look: many resolved
messages and their history, a few pending half messages, consumer groups
with a backlog of deliveries and some dead letters. Then every statement of
status.sql is EXPLAINed with the parameters the overview gives it (the
pool plans each execution for its values) and its plan may read messages,
message_history and deliveries through indexes only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import psycopg
import pytest

from coordinator.db.queries import parse_queries
from coordinator.domain.overview import (
    AGE_BOUNDS_SECONDS,
    COUNT_LIMIT,
    OLDEST_LISTED,
    RECENT_CHECK_SECONDS,
)

BIG_TABLES = {"messages", "message_history", "deliveries"}
RESOLVED = 200_000
PENDING = 200
DELIVERIES = 120_000  # in 4 consumer groups, one of them holding most

STATUS_SQL = files("coordinator.db").joinpath("sql", "queries", "status.sql").read_text()
QUERIES = parse_queries(STATUS_SQL)
# Statements that read no table.
NO_TABLE = {"overview_snapshot", "overview_clock"}
READING = sorted(set(QUERIES) - NO_TABLE)


def _params(name: str, now: datetime) -> dict[str, Any]:
    return {
        "pending_by_age": {"bounds": list(AGE_BOUNDS_SECONDS)},
        "oldest_half_messages": {"limit": OLDEST_LISTED},
        # a first read of the longest window the page asks for
        "resolutions_per_minute": {"since": now - timedelta(minutes=30)},
        "check_requests_by_group": {"recent_seconds": RECENT_CHECK_SECONDS},
        "consumer_figures": {"limit": COUNT_LIMIT},
        "producer_counts": {"producer_ttl_seconds": 30.0},
    }[name]  # a statement added to status.sql needs its parameters here


@pytest.fixture
def large(db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    # Resolved over the last 10 days, a message a few seconds apart; the
    # triggers fan nothing out (no subscription exists yet).
    db.execute(
        """
        INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,
                              state, born_at, resolved_at, resolution_source)
        SELECT 'm' || i, 't' || i, 'transactional', 'group-' || (i %% 5), 'topic-' || (i %% 7),
               '\\x00', CASE WHEN i %% 10 = 0 THEN 'rolled_back' ELSE 'committed' END,
               now() - make_interval(secs => i * 4.0), now() - make_interval(secs => i * 4.0 - 1),
               'client'
        FROM generate_series(1, %s) AS i
        """,
        (RESOLVED,),
    )
    db.execute(
        """
        INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,
                              state, born_at, next_check_at)
        SELECT 'p' || i, 'pt' || i, 'transactional', 'group-' || (i %% 5), 'topic-' || (i %% 7),
               '\\x00', 'prepared', now() - make_interval(secs => i * 30.0),
               now() + make_interval(secs => i)
        FROM generate_series(1, %s) AS i
        """,
        (PENDING,),
    )
    db.execute(
        """
        INSERT INTO message_history (message_offset, source, from_state, to_state)
        SELECT id, 'client', NULL, 'prepared' FROM messages
        """
    )
    for group in ("billing", "shipping", "audit", "search"):
        db.execute(
            "INSERT INTO subscriptions (consumer_group, topic, expression) "
            "VALUES (%s, 'topic-1', '*')",
            (group,),
        )
    db.execute(
        """
        INSERT INTO deliveries (message_offset, consumer_group, topic, committed_at)
        SELECT id,
               CASE WHEN id %% 10 < 7 THEN 'billing' WHEN id %% 10 < 8 THEN 'shipping'
                    WHEN id %% 10 < 9 THEN 'audit' ELSE 'search' END,
               topic, resolved_at
        FROM messages WHERE state = 'committed' ORDER BY id LIMIT %s
        """,
        (DELIVERIES,),
    )
    db.execute(
        """
        INSERT INTO dead_letters (message_offset, consumer_group, topic, attempts, committed_at)
        SELECT id, 'billing', topic, 16, resolved_at
        FROM messages WHERE state = 'committed' ORDER BY id DESC LIMIT 2000
        """
    )
    db.execute("ANALYZE")
    yield db


def _scans(plan: dict[str, Any]) -> Iterator[tuple[str, str]]:
    if "Relation Name" in plan:
        yield plan["Node Type"], plan["Relation Name"]
    for child in plan.get("Plans", ()):
        yield from _scans(child)


def _plan(conn: psycopg.Connection, name: str, now: datetime) -> dict[str, Any]:
    (document,) = conn.execute(
        "EXPLAIN (FORMAT JSON) " + QUERIES[name], _params(name, now)
    ).fetchone()
    return (document if isinstance(document, list) else json.loads(document))[0]["Plan"]


def test_no_statement_scans_a_big_table(large: psycopg.Connection) -> None:
    (now,) = large.execute("SELECT now()").fetchone()
    # Planned as the pool plans: every execution for its own values.
    large.execute("SET plan_cache_mode = force_custom_plan")
    scans = {name: sorted(set(_scans(_plan(large, name, now)))) for name in READING}
    assert {
        name: found
        for name, found in scans.items()
        if any(kind == "Seq Scan" and relation in BIG_TABLES for kind, relation in found)
    } == {}
    # Each reads what it is about, through the index meant for it.
    assert ("Index Scan", "deliveries") in scans["consumer_figures"]
    assert any(relation == "messages" for _, relation in scans["pending_by_age"])
    assert any(relation == "messages" for _, relation in scans["resolutions_per_minute"])
