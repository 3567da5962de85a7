"""The retention job's own config: how long each kind of row is kept, and the pace.

Built from the settings in `core/configs.py`, each field the setting of its
name; a test builds one with a few values (hours may be fractions: 1/3600 is
a second).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    # fileReservedTime: an unresolved half message expires this many hours after its birth.
    retention_hours: float
    # A resolved message with nothing left to deliver: hours after its resolution
    # (None: retention_hours).
    resolved_retention_hours: float | None
    # A delivery some group has not acked: hours after the message's commit.
    unacked_retention_hours: float
    # A dead letter: hours after it died.
    dead_letter_retention_hours: float
    # Every message stays at least this long after its resolution, so after its
    # birth too (duplicate detection; None: the resolved retention).
    duplicate_window_hours: float | None
    idle_consumer_group_hours: float
    remove_idle_consumer_groups: bool
    # Set: archive first, messages leave only through `pipeline archive`.
    archive_dir: Path | None
    retention_batch_size: int
    retention_interval_seconds: float
    retention_enabled: bool
    max_metric_label_values: int

    @property
    def resolved_retention(self) -> float:
        """Hours a resolved message is kept: its own setting, else retention_hours."""
        return self.resolved_retention_hours or self.retention_hours

    @property
    def duplicate_window(self) -> float:
        """Hours a message is kept after its resolution (and birth) at least."""
        return self.duplicate_window_hours or self.resolved_retention

    @property
    def archive_first(self) -> bool:
        """Whether messages are left to `pipeline archive`, which deletes them once archived."""
        return self.archive_dir is not None
