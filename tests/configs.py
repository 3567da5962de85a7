"""The configs a node builds, for tests that build a service or a door without one."""

from __future__ import annotations

from typing import Any

from coordinator.config import Settings
from coordinator.core.configs import ServiceConfigs


def configs(**settings: Any) -> ServiceConfigs:
    """The configs of these settings, the others at their defaults (as a node builds them)."""
    return ServiceConfigs.from_settings(Settings(**settings))
