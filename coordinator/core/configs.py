"""Each service's and door's own config, and the one place they are built from the settings.

A service takes its pool (in a `CoreContext`) and a small frozen config
holding only the values it reads, never the whole `Settings`: what a service
depends on is written in its config, and a test builds one with a few values.
The doors read theirs from the Coordinator they serve (`core.configs.http`).
`ServiceConfigs.from_settings` is the only reader of `Settings` in the core
and the doors (tests/unit/test_architecture.py holds them to that).

A config field is the setting of the same name, so a search for a setting
finds where it is used; the few values worked out from several settings are
in DERIVED, with the settings each reads. No field has a default: the
defaults are the settings' own, and a test takes them from `Settings`
(`ServiceConfigs.from_settings(Settings(...))`) or writes every value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from coordinator.config import Settings
from coordinator.core.retention.config import RetentionConfig
from coordinator.domain.hosts import is_loopback

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
    group_commit_linger_seconds: float
    max_delay_seconds: float


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    max_long_poll_seconds: float
    max_subscriptions_per_group: int
    max_metric_label_values: int


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
    max_check_answer_bytes: int
    check_push_secret: str | None = field(repr=False)
    # The key of check sources' passwords, or the file that holds it (sources.py).
    check_source_key: str | None = field(repr=False)
    check_source_key_file: Path | None


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    check_scheduler_enabled: bool
    check_scan_interval_seconds: float


@dataclass(frozen=True, slots=True)
class OverviewConfig:
    producer_ttl_seconds: float
    # A consumer group that has not received for this long is idle (as retention reports it).
    idle_consumer_group_hours: float
    retention_enabled: bool


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


@dataclass(frozen=True, slots=True)
class HttpDoorConfig:
    """What the HTTP door reads: its request limits, the Host names it answers, TLS."""

    max_request_bytes: int
    allowed_hosts: tuple[str, ...]
    metrics_open: bool
    max_metric_label_values: int
    max_connections: int
    request_read_timeout_seconds: float
    tls_cert_file: Path | None
    tls_key_file: Path | None


@dataclass(frozen=True, slots=True)
class GrpcDoorConfig:
    """What the RocketMQ gRPC door reads: where it listens, its limits, TLS."""

    host: str
    grpc_port: int | None
    max_batch_size: int
    max_body_bytes: int
    max_request_bytes: int
    max_check_immunity_seconds: float
    max_long_poll_seconds: float
    max_topics_per_stream: int
    producer_ttl_seconds: float
    max_connections: int
    grpc_handshake_timeout_seconds: float
    grpc_idle_timeout_seconds: float
    tls_cert_file: Path | None
    tls_key_file: Path | None


def open_allowed(settings: Settings) -> bool:
    """Whether this server may serve without tokens (loopback only, or --insecure)."""
    return settings.insecure or is_loopback(settings.host)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


# The config fields that are not one setting of their name: each worked out
# from the settings listed, in one place.
DERIVED: Mapping[str, tuple[tuple[str, ...], Callable[[Settings], Any]]] = {
    "max_check_immunity_seconds": (
        ("retention_hours", "check_interval_seconds"),
        lambda s: s.max_check_immunity_seconds,
    ),
    "check_push_secret": (("check_push_secret",), lambda s: _secret(s.check_push_secret)),
    "check_source_key": (("check_source_key",), lambda s: _secret(s.check_source_key)),
    "check_source_key_file": (
        ("check_source_key_file", "data_dir"),
        lambda s: s.check_source_key_file or s.data_dir / CHECK_SOURCE_KEY_FILE,
    ),
    "open_allowed": (("insecure", "host"), open_allowed),
}


@dataclass(frozen=True, slots=True)
class ServiceConfigs:
    transactions: TransactionsConfig
    delivery: DeliveryConfig
    checkback: CheckBackConfig
    scheduler: SchedulerConfig
    overview: OverviewConfig
    auth: AuthConfig
    retention: RetentionConfig
    http: HttpDoorConfig
    grpc: GrpcDoorConfig

    @classmethod
    def from_settings(cls, settings: Settings) -> ServiceConfigs:
        return cls(
            transactions=_named_alike(TransactionsConfig, settings),
            delivery=_named_alike(DeliveryConfig, settings),
            checkback=_named_alike(CheckBackConfig, settings),
            scheduler=_named_alike(SchedulerConfig, settings),
            overview=_named_alike(OverviewConfig, settings),
            auth=_named_alike(AuthConfig, settings, limits=_named_alike(LimitsConfig, settings)),
            retention=_named_alike(RetentionConfig, settings),
            http=_named_alike(HttpDoorConfig, settings),
            grpc=_named_alike(GrpcDoorConfig, settings),
        )


Config = TypeVar("Config")


def _named_alike(config: type[Config], settings: Settings, **others: Any) -> Config:
    """A config whose fields are the settings of the same names, DERIVED ones, or `others`."""
    values = {}
    for each in fields(config):  # type: ignore[arg-type]  # a config type is a dataclass
        if each.name in others:
            values[each.name] = others[each.name]
        elif each.name in DERIVED:
            values[each.name] = DERIVED[each.name][1](settings)
        else:
            values[each.name] = getattr(settings, each.name)
    return config(**values)
