"""Each service's own config, and the one place they are built from the settings.

A service takes its pool (in a `CoreContext`) and a small frozen config
holding only the values it reads, never the whole `Settings`: what a service
depends on is written in its config, and a test builds one with a few values.
`ServiceConfigs.from_settings` is the only reader of `Settings` in the core
(tests/unit/test_architecture.py holds it to that).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from coordinator.config import Settings
from coordinator.core.retention.config import RetentionConfig
from coordinator.domain.check_urls import DEFAULT_MAX_CHECK_ANSWER_BYTES
from coordinator.domain.delivery_time import DEFAULT_MAX_DELAY_SECONDS

# Where a node keeps the check sources' key when no setting gives it.
CHECK_SOURCE_KEY_FILE = "check-source.key"


@dataclass(frozen=True, slots=True)
class TransactionsConfig:
    """Prepare, send and end; a `MessageLimits` for the message rules."""

    max_batch_size: int
    max_body_bytes: int
    max_properties_bytes: int
    max_check_immunity_seconds: float
    reject_transactional_messages: bool
    transaction_timeout_seconds: float
    group_commit_max_batch: int
    group_commit_max_inflight: int
    max_delay_seconds: float = DEFAULT_MAX_DELAY_SECONDS
    group_commit_linger_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    max_long_poll_seconds: float
    max_subscriptions_per_group: int = 100
    max_metric_label_values: int = 1000


@dataclass(frozen=True, slots=True)
class CheckBackConfig:
    """The producer registry, check rounds, pull and push dispatch, operator actions."""

    producer_ttl_seconds: float
    producer_forget_seconds: float
    retention_hours: float
    check_batch_size: int
    check_max: int
    check_interval_seconds: float
    check_backoff: bool
    check_backoff_factor: float
    check_backoff_max_seconds: float
    check_push_timeout_seconds: float
    max_inflight_dispatches: int
    max_long_poll_seconds: float
    check_poll_fallback_seconds: float
    max_check_answer_bytes: int = DEFAULT_MAX_CHECK_ANSWER_BYTES
    check_push_secret: str | None = field(default=None, repr=False)
    # The key of check sources' passwords, or the file that holds it (sources.py).
    check_source_key: str | None = field(default=None, repr=False)
    check_source_key_file: Path | None = None


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    enabled: bool
    scan_interval_seconds: float


@dataclass(frozen=True, slots=True)
class OverviewConfig:
    producer_ttl_seconds: float
    # A consumer group that has not received for this long is idle (as retention reports it).
    idle_consumer_group_hours: float = 168.0
    retention_enabled: bool = True


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    rate_limit_per_second: float
    rate_limit_burst: int
    max_long_polls_per_token: int


@dataclass(frozen=True, slots=True)
class AuthConfig:
    token_refresh_seconds: float
    # Whether the server may serve without tokens (see auth.py).
    open_allowed: bool
    limits: LimitsConfig


def is_loopback(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_allowed(settings: Settings) -> bool:
    """Whether this server may serve without tokens (loopback only, or --insecure)."""
    return settings.insecure or is_loopback(settings.host)


@dataclass(frozen=True, slots=True)
class ServiceConfigs:
    transactions: TransactionsConfig
    delivery: DeliveryConfig
    checkback: CheckBackConfig
    scheduler: SchedulerConfig
    overview: OverviewConfig
    auth: AuthConfig
    retention: RetentionConfig

    @classmethod
    def from_settings(cls, settings: Settings) -> ServiceConfigs:
        secret = settings.check_push_secret
        return cls(
            transactions=_named_alike(TransactionsConfig, settings),
            delivery=_named_alike(DeliveryConfig, settings),
            checkback=_named_alike(
                CheckBackConfig,
                settings,
                check_push_secret=secret.get_secret_value() if secret else None,
                check_source_key=(
                    settings.check_source_key.get_secret_value()
                    if settings.check_source_key
                    else None
                ),
                check_source_key_file=(
                    settings.check_source_key_file or settings.data_dir / CHECK_SOURCE_KEY_FILE
                ),
            ),
            scheduler=SchedulerConfig(
                enabled=settings.check_scheduler_enabled,
                scan_interval_seconds=settings.check_scan_interval_seconds,
            ),
            overview=_named_alike(OverviewConfig, settings),
            auth=_named_alike(
                AuthConfig,
                settings,
                open_allowed=open_allowed(settings),
                limits=_named_alike(LimitsConfig, settings),
            ),
            retention=retention_config(settings),
        )


def retention_config(settings: Settings) -> RetentionConfig:
    return RetentionConfig(
        resolved_retention_hours=settings.resolved_retention,
        unacked_retention_hours=settings.unacked_retention_hours,
        dead_letter_retention_hours=settings.dead_letter_retention_hours,
        duplicate_window_hours=settings.duplicate_window_hours,
        idle_consumer_group_hours=settings.idle_consumer_group_hours,
        remove_idle_consumer_groups=settings.remove_idle_consumer_groups,
        archive_first=settings.archive_dir is not None,
        batch_size=settings.retention_batch_size,
        interval_seconds=settings.retention_interval_seconds,
        enabled=settings.retention_enabled,
        max_metric_label_values=settings.max_metric_label_values,
    )


Config = TypeVar("Config")


def _named_alike(config: type[Config], settings: Settings, **others: Any) -> Config:
    """A config whose fields are the settings of the same names, but for `others`."""
    values = {
        each.name: others[each.name] if each.name in others else getattr(settings, each.name)
        for each in fields(config)  # type: ignore[arg-type]  # a config type is a dataclass
    }
    return config(**values)
