"""Where the archive keeps each table: a Parquet dataset per table, partitioned
by the message's birth date (UTC) and topic (the layout tables.py describes).

Plain paths, no Spark: the report's in-process engine reads the same files.

The layout has no version number: each Parquet file carries its own schema,
and a table's columns change only by adding nullable ones (messages gained
deliver_at and trace_context). Files written before a column existed stay
as they are; every reader asks for the current columns and reads a missing
one as null (tables.py's schemas, the report's column list), and the
checksums leave a null added column out, so such rows verify as before.
"""

from __future__ import annotations

from pathlib import Path

MESSAGES = "messages"
HISTORY = "history"
PARTITION_COLUMNS = ("born_date", "topic")


def run_file_prefix(run_id: str) -> str:
    """How an archive run's published files are named: run-<run>-<Spark's part name>."""
    return f"run-{run_id}-"


def day_dir(root: Path, table: str, day: str) -> Path:
    """One birth date's partition of an archive table (a directory per topic below)."""
    return root / table / f"{PARTITION_COLUMNS[0]}={day}"


def archive_days(root: Path, table: str) -> list[str]:
    """The birth dates (ISO) an archive table has partitions for."""
    prefix = f"{PARTITION_COLUMNS[0]}="
    return sorted(
        p.name.removeprefix(prefix) for p in (root / table).glob(f"{prefix}*") if p.is_dir()
    )


def day_files(root: Path, table: str, days: list[str]) -> list[Path]:
    """The Parquet files of these birth dates' partitions (every topic)."""
    files: list[Path] = []
    for day in days:
        files.extend(sorted(day_dir(root, table, day).glob("*=*/*.parquet")))
    return files
