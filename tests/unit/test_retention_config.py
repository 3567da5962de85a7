"""The retention settings' defaults: a small retention_hours makes every retention small."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.config import Settings
from coordinator.core.configs import ServiceConfigs


def test_resolved_retention_and_duplicate_window_follow_retention_hours_by_default() -> None:
    config = ServiceConfigs.from_settings(Settings(database_url=None, retention_hours=0.5))
    retention = config.retention
    assert retention.resolved_retention == 0.5
    assert retention.duplicate_window == 0.5
    assert (retention.unacked_retention_hours, retention.dead_letter_retention_hours) == (72, 168)
    assert not retention.archive_first and not retention.remove_idle_consumer_groups
    assert retention.retention_enabled and retention.retention_interval_seconds <= 10


def test_each_retention_may_be_set_on_its_own() -> None:
    settings = Settings(
        database_url=None,
        resolved_retention_hours=2,
        duplicate_window_hours=24,
        archive_dir=Path("/srv/archive"),
    )
    retention = ServiceConfigs.from_settings(settings).retention
    assert (retention.resolved_retention, retention.duplicate_window) == (2, 24)
    assert retention.archive_first


def test_the_interval_is_read_from_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COORDINATOR_RETENTION_INTERVAL_SECONDS", "2.5")
    assert Settings.from_environment(database_url=None).retention_interval_seconds == 2.5
