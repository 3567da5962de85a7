"""A run's names (topic, groups) and files (logs, journals), all derived from its id."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONSUMER_GROUPS = ("a", "b")  # the report's names; the coordinator's are run-specific


@dataclass(frozen=True)
class Layout:
    run_id: str
    workdir: Path

    # Names unique to the run, so a soak on a database that other runs used
    # sees its own messages only.
    @property
    def topic(self) -> str:
        return f"soak-{self.run_id}"

    @property
    def producer_group(self) -> str:
        return f"soak-{self.run_id}"

    def consumer_group(self, name: str) -> str:
        return f"soak-{self.run_id}-{name}"

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def producer_journals(self) -> Path:
        return self.workdir / "journal" / "producers"

    def consumer_journals(self, name: str) -> Path:
        return self.workdir / "journal" / "consumers" / name

    @property
    def stop_load_file(self) -> Path:
        """Its existence tells the producers to stop sending."""
        return self.workdir / "stop-load"

    def make_directories(self) -> None:
        for directory in (
            self.logs,
            self.producer_journals,
            *(self.consumer_journals(name) for name in CONSUMER_GROUPS),
        ):
            directory.mkdir(parents=True, exist_ok=True)
