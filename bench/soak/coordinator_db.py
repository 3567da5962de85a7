"""What the coordinator's own tables say about one soak run (its topic), in plain SQL."""

from __future__ import annotations

from collections import Counter, defaultdict

import psycopg

from coordinator.config import DEFAULT_DATABASE_SCHEMA
from coordinator.db.urls import in_schema


def connect(url: str) -> psycopg.Connection:
    url = in_schema(url, DEFAULT_DATABASE_SCHEMA)
    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def unsettled(conn: psycopg.Connection, topic: str) -> tuple[int, int]:
    """(messages still prepared, deliveries not yet acked) of the run."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM messages WHERE topic = %(t)s AND state = 'prepared'),
               (SELECT count(*) FROM deliveries WHERE topic = %(t)s)
        """,
        {"t": topic},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def states(conn: psycopg.Connection, topic: str) -> dict[str, str]:
    """Every message of the run: message id -> state."""
    rows = conn.execute("SELECT message_id, state FROM messages WHERE topic = %s", (topic,))
    return {message_id: state for message_id, state in rows}


def dead_letters(conn: psycopg.Connection, topic: str) -> dict[str, frozenset[str]]:
    """Consumer group -> the message ids it dead-lettered."""
    rows = conn.execute(
        """
        SELECT x.consumer_group, m.message_id
        FROM dead_letters x JOIN messages m ON m.id = x.message_offset
        WHERE x.topic = %s
        """,
        (topic,),
    )
    found: dict[str, set[str]] = defaultdict(set)
    for group, message_id in rows:
        found[group].add(message_id)
    return {group: frozenset(ids) for group, ids in found.items()}


def resolutions(conn: psycopg.Connection, topic: str) -> Counter[str]:
    """How the run's half messages left `prepared`: "source -> state" -> count."""
    rows = conn.execute(
        """
        SELECT h.source, h.to_state, count(*)
        FROM message_history h JOIN messages m ON m.id = h.message_offset
        WHERE m.topic = %s AND h.from_state = 'prepared'
        GROUP BY 1, 2
        """,
        (topic,),
    )
    return Counter({f"{source} -> {state}": int(n) for source, state, n in rows})


def most_checks(conn: psycopg.Connection, topic: str) -> int:
    row = conn.execute(
        "SELECT coalesce(max(check_count), 0) FROM messages WHERE topic = %s", (topic,)
    ).fetchone()
    return int(row[0]) if row else 0
