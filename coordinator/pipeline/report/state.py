"""What an incremental report keeps between runs: the partial figures of closed hours.

Figures are per producer group, topic and hour of birth. A message's row
changes after its birth only while it is prepared (check count, then its
resolution), when an operator resolves or re-arms a discarded one (its
resolved_at becomes that moment, or it is prepared again), and when the
archive moves it to Parquet (its values unchanged). So an hour is closed
when it ended more than CLOSE_MARGIN ago (no transaction still writing a
message born in it: born_at is the database clock at the insert) and none of
its messages is prepared; its partials (figures.py) are stored and reused,
and its rows are not read again. A closed hour is read again when one of its
messages is prepared again or was resolved since the previous run (the
named query pipeline_report_unsettled_hours finds both through indexes).
Archiving a closed hour's messages leaves its stored figures as they were.

STATE/state.json             the manifest, replaced atomically at the end of a run
STATE/closed/<date>-<run>.parquet   partials of that UTC date's closed hours

A run rewrites only the dates whose closed hours changed; files no manifest
names (left by a run that stopped before its manifest) are removed by the
next run that finishes. A state written for another database, another
--archive-dir or another version of this format is not used: that run
recomputes every hour (as --full does) and replaces it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator.pipeline.figures import (
    HOUR_US,
    PARTIAL_KEYS,
    PARTIALS_SCHEMA,
    empty_partials,
    epoch_micros,
    hour_start,
)

FORMAT_VERSION = 1
MANIFEST = "state.json"
CLOSED_DIR = "closed"
# Longer than any transaction that inserts or resolves a message stays open:
# a row committed after a run read the table was written (born_at, resolved_at)
# at most this long before that run's clock.
CLOSE_MARGIN = timedelta(minutes=10)
DAY_US = 24 * HOUR_US


@dataclass
class Manifest:
    version: int
    database: str
    archive: str | None
    checked_at: str  # the database's clock when the run that wrote it started
    recent_from: str  # first hour left open because it was recent
    open_hours: list[str]  # older hours left open: a message in each was still prepared
    files: dict[str, str] = field(default_factory=dict)  # UTC date -> file under closed/
    written_at: str = ""

    def checked(self) -> datetime:
        return datetime.fromisoformat(self.checked_at)


@dataclass(frozen=True)
class ReadPlan:
    """What a run reads: every row (full), or the rows born in `ranges`; and what it reuses."""

    full: bool
    reason: str  # why every hour is read, or which hours are
    ranges: list[tuple[datetime, datetime | None]]  # [start, end) of birth; None: no end
    kept: pa.Table  # partials of the closed hours reused
    stored_hours: frozenset[int]  # every hour the state held closed (UTC microseconds)
    reread_closed: int  # of those, hours read again (one of their messages changed)

    @property
    def kept_hours(self) -> int:
        return len(self.stored_hours) - self.reread_closed


def recent_from(now: datetime) -> datetime:
    """The first hour not closed at `now`: hours from here on may still get messages."""
    edge = now.astimezone(UTC) - CLOSE_MARGIN
    return edge.replace(minute=0, second=0, microsecond=0)


def load(state_dir: Path) -> Manifest | None:
    path = state_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return Manifest(**data)
    except (ValueError, TypeError):
        return None  # unreadable or of another shape: recomputed and replaced


def _stale(
    manifest: Manifest | None, state_dir: Path, database: str, archive: str | None, now: datetime
) -> str | None:
    """Why a stored state cannot be used, or None when it can."""
    if manifest is None:
        return "no stored figures yet"
    if manifest.version != FORMAT_VERSION:
        return "the stored figures are of another version of the report"
    if manifest.database != database:
        return "the stored figures are of another database"
    if manifest.archive != archive:
        return "the stored figures were made " + (
            f"with --archive-dir {manifest.archive}"
            if manifest.archive
            else "without --archive-dir"
        )
    if manifest.checked() > now:
        return "the stored figures are newer than the database's clock"
    missing = [n for n in manifest.files.values() if not (state_dir / CLOSED_DIR / n).is_file()]
    if missing:
        return f"a stored file is missing ({missing[0]})"
    return None


def _hour_us(moment: datetime) -> int:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    micros = epoch_micros(aware)
    return micros - micros % HOUR_US


def merged_ranges(hours: Iterable[int]) -> list[tuple[datetime, datetime]]:
    """Hours (UTC microseconds) as the fewest [start, end) ranges."""
    ranges: list[list[int]] = []
    for hour in sorted(set(hours)):
        if ranges and ranges[-1][1] == hour:
            ranges[-1][1] = hour + HOUR_US
        else:
            ranges.append([hour, hour + HOUR_US])
    return [(hour_start(start), hour_start(end)) for start, end in ranges]


def _read_closed(state_dir: Path, files: Iterable[str]) -> pa.Table:
    tables = [
        pq.read_table(state_dir / CLOSED_DIR / name, schema=PARTIALS_SCHEMA) for name in files
    ]
    return pa.concat_tables(tables) if tables else empty_partials()


def plan(
    state_dir: Path,
    manifest: Manifest | None,
    *,
    database: str,
    archive: str | None,
    now: datetime,
    unsettled_hours: Callable[[datetime], list[datetime]],
    full: bool,
) -> ReadPlan:
    """What this run must read, given the stored state.

    unsettled_hours(since): the hours with a prepared message, or with one
    resolved from `since` on (pipeline_report_unsettled_hours); asked only
    when the stored state can be used.
    """
    reason = "--full" if full else _stale(manifest, state_dir, database, archive, now)
    if reason is not None or manifest is None:
        return ReadPlan(True, reason or "", [], empty_partials(), frozenset(), 0)
    closed = _read_closed(state_dir, manifest.files.values())
    changed = unsettled_hours(manifest.checked() - CLOSE_MARGIN)
    reread = {_hour_us(h) for h in changed} | {
        _hour_us(datetime.fromisoformat(h)) for h in manifest.open_hours
    }
    recent = datetime.fromisoformat(manifest.recent_from)
    reread = {h for h in reread if h < _hour_us(recent)}
    in_closed = pc.is_in(closed.column("hour_us"), value_set=pa.array(sorted(reread), pa.int64()))
    kept = closed.filter(pc.invert(in_closed))
    closed_hours = frozenset(closed.column("hour_us").to_pylist())
    ranges: list[tuple[datetime, datetime | None]] = [*merged_ranges(reread), (recent, None)]
    return ReadPlan(
        full=False,
        reason=f"hours born from {recent:%Y-%m-%d %H:%M} UTC on"
        + (f", and {len(reread)} older hours" if reread else ""),
        ranges=ranges,
        kept=kept,
        stored_hours=closed_hours,
        reread_closed=len(closed_hours & reread),
    )


def _hours_with_prepared(partials: pa.Table) -> set[int]:
    with_prepared = partials.filter(pc.greater(partials.column("prepared"), 0))
    return set(with_prepared.column("hour_us").to_pylist())


def _date_of(hour_us: int) -> str:
    return hour_start(hour_us - hour_us % DAY_US).date().isoformat()


def _day_starts(table: pa.Table) -> pa.Array:
    hours = table.column("hour_us").to_numpy()
    return pa.array(hours - hours % DAY_US, pa.int64())


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def save(
    state_dir: Path,
    previous: Manifest | None,
    read: ReadPlan,
    computed: pa.Table,
    *,
    database: str,
    archive: str | None,
    now: datetime,
) -> Manifest:
    """Store the closed hours among those just computed; keep the reused ones' files."""
    cutoff = recent_from(now)
    cutoff_us = _hour_us(cutoff)
    pending = _hours_with_prepared(computed)
    computed_hours = set(computed.column("hour_us").to_pylist())
    closing = {h for h in computed_hours if h < cutoff_us and h not in pending}
    open_hours = sorted(h for h in computed_hours if h < cutoff_us and h in pending)
    newly_closed = computed.filter(
        pc.is_in(computed.column("hour_us"), value_set=pa.array(sorted(closing), pa.int64()))
    )
    files = {} if read.full or previous is None else dict(previous.files)
    kept_hours = set(read.kept.column("hour_us").to_pylist())
    # Dates whose stored hours change: hours closing now, and stored hours read again.
    touched = {_date_of(h) for h in closing | (read.stored_hours - kept_hours)}
    run = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]
    directory = state_dir / CLOSED_DIR
    directory.mkdir(parents=True, exist_ok=True)
    stored = pa.concat_tables([read.kept, newly_closed.cast(PARTIALS_SCHEMA)])
    dates = _day_starts(stored)
    for day in sorted(touched):
        day_us = epoch_micros(datetime.fromisoformat(day).replace(tzinfo=UTC))
        rows = stored.filter(pc.equal(dates, pa.scalar(day_us, pa.int64())))
        files.pop(day, None)
        if rows.num_rows:
            name = f"{day}-{run}.parquet"
            rows = rows.sort_by([(key, "ascending") for key in PARTIAL_KEYS])
            pq.write_table(rows, directory / name, compression="zstd")
            files[day] = name
    manifest = Manifest(
        version=FORMAT_VERSION,
        database=database,
        archive=archive,
        checked_at=now.isoformat(),
        recent_from=cutoff.isoformat(),
        open_hours=[hour_start(h).isoformat() for h in open_hours],
        files=dict(sorted(files.items())),
        written_at=datetime.now(UTC).isoformat(),
    )
    _write_atomically(state_dir / MANIFEST, json.dumps(asdict(manifest), indent=2))
    named = set(files.values())
    for path in directory.glob("*.parquet"):
        if path.name not in named:
            path.unlink(missing_ok=True)
    return manifest
