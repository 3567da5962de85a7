"""Test data for the pipeline: generated histories and hand-made awkward rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq

from coordinator.pipeline.synthetic import generate

INSERT_MESSAGE = """
INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, tags, keys,
                      message_group, body, properties, state, check_count, check_immunity,
                      born_at, next_check_at, resolved_at, resolution_source, deliver_at,
                      trace_context)
VALUES (%(message_id)s, %(transaction_id)s, %(kind)s, %(producer_group)s, %(topic)s, %(tags)s,
        %(keys)s, %(message_group)s, %(body)s, %(properties)s::jsonb, %(state)s,
        %(check_count)s, %(check_immunity)s, %(born_at)s, %(next_check_at)s, %(resolved_at)s,
        %(resolution_source)s, %(deliver_at)s, %(trace_context)s)
RETURNING id
"""


def add_message(db: psycopg.Connection, **fields: Any) -> int:
    """One message with its creation (and resolution) history rows; returns its offset."""
    values: dict[str, Any] = {
        "message_id": f"M-{fields.get('transaction_id') or id(fields)}",
        "transaction_id": None,
        "kind": "transactional",
        "producer_group": "shop",
        "topic": "orders",
        "tags": None,
        "keys": [],
        "message_group": None,
        "body": b"body",
        "properties": "{}",
        "state": "committed",
        "check_count": 0,
        "check_immunity": None,
        "born_at": None,
        "next_check_at": None,
        "resolved_at": None,
        "resolution_source": None,
        "deliver_at": None,
        "trace_context": None,
    }
    values.update(fields)
    if values["state"] != "prepared":
        values["resolved_at"] = values["resolved_at"] or values["born_at"] + timedelta(seconds=1)
        values["resolution_source"] = values["resolution_source"] or "client"
    (offset,) = db.execute(INSERT_MESSAGE, values).fetchone()  # type: ignore[misc]
    db.execute(
        "INSERT INTO message_history (message_offset, at, source, from_state, to_state, detail) "
        "VALUES (%s, %s, 'client', NULL, 'prepared', %s)",
        (offset, values["born_at"], fields.get("detail")),
    )
    if values["state"] != "prepared":
        db.execute(
            "INSERT INTO message_history (message_offset, at, source, from_state, to_state) "
            "VALUES (%s, %s, %s, 'prepared', %s)",
            (offset, values["resolved_at"], values["resolution_source"], values["state"]),
        )
    return offset


def seed(db: psycopg.Connection, count: int, anchor: datetime, **options: Any) -> None:
    generate(db, count, anchor=anchor, **options)


def parquet_column(root: Path, table: str, column: str) -> list[Any]:
    """Every value of a column over an archive table's published files."""
    values: list[Any] = []
    for path in sorted((root / table).glob("*=*/*=*/*.parquet")):
        values.extend(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return values


# The messages' columns the archive gained after its first layout.
ADDED_MESSAGE_COLUMNS = ("deliver_at", "trace_context")


def drop_added_columns(files: list[Path]) -> int:
    """Rewrite archive message files as the archive wrote them before
    ADDED_MESSAGE_COLUMNS existed; returns how many files had them."""
    rewritten = 0
    for path in files:
        table = pq.read_table(path)
        present = [c for c in ADDED_MESSAGE_COLUMNS if c in table.column_names]
        if present:
            pq.write_table(table.drop_columns(present), path, coerce_timestamps="us")
            # Hadoop's checksum of a staged file no longer matches it: Spark would refuse it.
            path.with_name(f".{path.name}.crc").unlink(missing_ok=True)
            rewritten += 1
    return rewritten
