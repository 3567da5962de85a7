"""What a report run reads, whichever engine reads it.

The live half messages come from one named query: every row
(pipeline_report_messages), or, for an incremental run, those born in the
ranges of birth its plan names (pipeline_report_messages_born_in). The
archive adds its rows of the birth dates those ranges touch. Both engines
(spark.py on Spark, arrow.py in the command's process) read
exactly this, and each half message once: live rows win over archived ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from coordinator.pipeline.archive_layout import MESSAGES, archive_days, run_file_prefix
from coordinator.pipeline.manifest import runs_dir, unfinished_runs
from coordinator.pipeline.report.state import ReadPlan

BirthRanges = list[tuple[datetime, datetime | None]]  # [start, end); None: no end


@dataclass(frozen=True)
class ReportInput:
    url: str
    query_name: str
    params: dict[str, Any] | None
    born_in: BirthRanges | None  # None: every hour
    archive_dir: Path | None
    archive_days: list[str]  # the archive's birth dates to open (ISO)
    # archive runs not done: only their files' rows are checked against the
    # live offsets (the other runs' messages are gone from PostgreSQL)
    overlapping_runs: list[str]

    @property
    def overlapping_marks(self) -> list[str]:
        """What the paths of those runs' files contain."""
        return [f"/{run_file_prefix(run)}" for run in self.overlapping_runs]

    def overlaps(self, path: str) -> bool:
        """Whether an archive file may hold a message PostgreSQL still has."""
        return any(mark in path for mark in self.overlapping_marks)


def _array_literal(moments: list[datetime | None]) -> str:
    """timestamptz values as a PostgreSQL array literal; None is 'infinity'."""
    return "{" + ",".join(f'"{m.isoformat()}"' if m else '"infinity"' for m in moments) + "}"


def days_of(ranges: BirthRanges, present: list[str]) -> list[str]:
    """The archive's birth dates that overlap the ranges."""
    chosen = []
    for day in present:
        first = datetime.fromisoformat(day).replace(tzinfo=UTC)
        following = first + timedelta(days=1)
        if any(start < following and (end is None or first < end) for start, end in ranges):
            chosen.append(day)
    return chosen


def overlapping_runs(archive_dir: Path) -> list[str]:
    """Archive runs whose files may hold messages PostgreSQL still has.

    Every run not done: a run's files reach the archive while it is verified
    (a crash mid-publish leaves some there, its status still `verified`), and
    its messages leave PostgreSQL only when it is done deleting (those it
    keeps, only when it is done taking them back out of its files).
    """
    if not runs_dir(archive_dir).is_dir():
        return []
    return [run.run_id for run in unfinished_runs(archive_dir)]


def report_input(url: str, archive_dir: Path | None, read: ReadPlan) -> ReportInput:
    if read.full:
        name, params, ranges = "pipeline_report_messages", None, None
    else:
        name = "pipeline_report_messages_born_in"
        params = {
            "starts": _array_literal([start for start, _ in read.ranges]),
            "ends": _array_literal([end for _, end in read.ranges]),
        }
        ranges = read.ranges
    days: list[str] = []
    runs: list[str] = []
    if archive_dir is not None:
        present = archive_days(archive_dir, MESSAGES)
        days = present if ranges is None else days_of(ranges, present)
        runs = overlapping_runs(archive_dir)
    return ReportInput(url, name, params, ranges, archive_dir, days, runs)
