"""The retention job: keeps the coordinator's own tables to size (docs/operations.md)."""

from coordinator.core.retention.config import RetentionConfig
from coordinator.core.retention.service import Retention

__all__ = ["Retention", "RetentionConfig"]
