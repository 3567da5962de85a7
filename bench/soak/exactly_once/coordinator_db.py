"""What the coordinator's tables say about how the exactly-once run's half messages settled."""

from __future__ import annotations

from collections import Counter

import psycopg


def resolutions_by_group(conn: psycopg.Connection, topic: str) -> Counter[str]:
    """ "producer group: source -> state" -> count, for every message that left `prepared`."""
    rows = conn.execute(
        """
        SELECT m.producer_group, h.source, h.to_state, count(*)
        FROM message_history h JOIN messages m ON m.id = h.message_offset
        WHERE m.topic = %s AND h.from_state = 'prepared'
        GROUP BY 1, 2, 3
        """,
        (topic,),
    )
    return Counter({f"{group}: {source} -> {state}": int(n) for group, source, state, n in rows})


def settled_by_check(conn: psycopg.Connection, topic: str) -> frozenset[str]:
    """The message ids a check-back settled (a producer's answer or the database's)."""
    rows = conn.execute(
        """
        SELECT m.message_id
        FROM message_history h JOIN messages m ON m.id = h.message_offset
        WHERE m.topic = %s AND h.from_state = 'prepared' AND h.source = 'check'
        """,
        (topic,),
    )
    return frozenset(row[0] for row in rows)
