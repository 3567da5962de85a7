"""Every setting reaches the code that uses it under its own name, with its one default."""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from coordinator.config import Settings
from coordinator.core.configs import DERIVED, ServiceConfigs

# Read where a node starts (its database, pools and logs; `coordinator serve`
# binds the HTTP port), not by a service nor a door.
NODE_SETTINGS = {
    "database_url",
    "read_database_url",
    "database_schema",
    "pool_min_size",
    "pool_max_size",
    "pool_timeout_seconds",
    "database_deadline_seconds",
    "synchronous_commit",
    "log_format",
    "access_log",
    "port",
}
# Documented for push producers, which check the signed requests they are sent.
PRODUCER_SETTINGS = {"check_push_max_age_seconds"}


def _field_names(config: Any) -> set[str]:
    names = set()
    for each in fields(config):
        value = getattr(config, each.name)
        names |= _field_names(value) if is_dataclass(value) else {each.name}
    return names


def _read_settings(configs: Any) -> set[str]:
    """The settings the configs hold: their fields' names, and what DERIVED ones read."""
    names = _field_names(configs)
    derived = {setting for name in names & DERIVED.keys() for setting in DERIVED[name][0]}
    return (names - DERIVED.keys()) | derived


def test_every_setting_reaches_a_config_or_is_read_where_a_node_starts() -> None:
    # A service or door reads its own config, never `Settings` (test_architecture.py).
    read = _read_settings(ServiceConfigs.from_settings(Settings()))
    assert read - Settings.model_fields.keys() == set(), "a config field named after no setting"
    unread = Settings.model_fields.keys() - read
    assert unread == NODE_SETTINGS | PRODUCER_SETTINGS


def test_a_config_holds_the_settings_values_by_name() -> None:
    settings = Settings(
        group_commit_linger_seconds=0.01, retention_interval_seconds=7.5, check_max=4
    )
    configs = ServiceConfigs.from_settings(settings)
    assert configs.transactions.group_commit_linger_seconds == 0.01
    assert configs.retention.retention_interval_seconds == 7.5
    assert configs.checkback.check_max == 4


def test_a_service_config_takes_the_defaults_of_the_settings() -> None:
    # A service built from the defaults behaves as the one a node serves.
    configs = ServiceConfigs.from_settings(Settings())
    defaults = {name: info.default for name, info in Settings.model_fields.items()}
    assert (
        configs.transactions.group_commit_linger_seconds == defaults["group_commit_linger_seconds"]
    )
    assert configs.delivery.max_long_poll_seconds == defaults["max_long_poll_seconds"]
    assert configs.scheduler.check_scheduler_enabled is defaults["check_scheduler_enabled"]
