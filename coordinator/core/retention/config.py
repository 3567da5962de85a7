"""The retention job's own config: how long each kind of row is kept, and the pace.

Built from the settings in `core/configs.py`; a test builds one with a few
values (hours may be fractions: 1/3600 is a second).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    # A resolved message with nothing left to deliver: hours after its resolution.
    resolved_retention_hours: float
    # A delivery some group has not acked: hours after the message's commit.
    unacked_retention_hours: float = 72.0
    # A dead letter: hours after it died.
    dead_letter_retention_hours: float = 168.0
    # Every message stays at least this long after its resolution, so after its
    # birth too (duplicate detection).
    duplicate_window_hours: float | None = None
    idle_consumer_group_hours: float = 168.0
    remove_idle_consumer_groups: bool = False
    # Archive first: messages leave only through `pipeline archive`.
    archive_first: bool = False
    batch_size: int = 1000
    interval_seconds: float = 5.0
    enabled: bool = True
    max_metric_label_values: int = 1000

    @property
    def duplicate_window(self) -> float:
        """Hours a message is kept after its resolution (and birth) at least."""
        return self.duplicate_window_hours or self.resolved_retention_hours
