"""An archive run's manifest: what the run selected and how far it got.

One JSON file per run under ARCHIVE/_runs/, replaced atomically (write a
temporary file, fsync, rename), so after a crash it says either the old step
or the new one, never half of either. Each step of the run is idempotent and
the manifest moves on only after a step's effects are complete: rerunning
from whatever status it holds finishes the run without losing or duplicating
a row.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

RUNS_DIR = "_runs"
STAGING_DIR = "_staging"


class RunStatus(StrEnum):
    PLANNED = "planned"  # cutoff and max offset frozen; copying (again) from here
    COPIED = "copied"  # staged Parquet written, not yet verified
    VERIFIED = "verified"  # staged copy matches PostgreSQL; files listed
    PUBLISHED = "published"  # files moved into the archive; deleting from here
    DELETED = "deleted"  # deletes done; finishing (dropping what had to stay)
    DONE = "done"


@dataclass
class PartitionRecord:
    born_date: str
    topic: str
    messages: int
    messages_checksum: str  # decimal text: sums exceed JSON's safe integers
    history: int
    history_checksum: str


@dataclass
class RunManifest:
    run_id: str
    status: RunStatus
    cutoff: str
    max_id: int
    older_than_seconds: float
    created_at: str
    partitions: list[PartitionRecord] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # staged Parquet, relative to staging
    deleted: int = 0
    kept: list[int] = field(default_factory=list)  # archived, then found undeletable
    finished_at: str | None = None

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    @property
    def history(self) -> int:
        return sum(p.history for p in self.partitions)

    @staticmethod
    def new_run_id() -> str:
        return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def runs_dir(archive: Path) -> Path:
    return archive / RUNS_DIR


def staging_dir(archive: Path, run_id: str) -> Path:
    return archive / STAGING_DIR / run_id


def manifest_path(archive: Path, run_id: str) -> Path:
    return runs_dir(archive) / f"{run_id}.json"


def save(archive: Path, manifest: RunManifest) -> None:
    target = manifest_path(archive, manifest.run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".json.tmp")
    with temporary.open("w") as out:
        json.dump(asdict(manifest), out, indent=2)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, target)


def load(path: Path) -> RunManifest:
    data = json.loads(path.read_text())
    data["status"] = RunStatus(data["status"])
    data["partitions"] = [PartitionRecord(**p) for p in data.get("partitions", [])]
    return RunManifest(**data)


def unfinished_runs(archive: Path) -> list[RunManifest]:
    """Runs a crash (or a failed verification) left before `done`, oldest first."""
    found = [load(p) for p in sorted(runs_dir(archive).glob("*.json"))]
    return [m for m in found if m.status is not RunStatus.DONE]
