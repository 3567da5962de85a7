"""Settings with RocketMQ's broker defaults, read from COORDINATOR_* variables.

Names say what they are and carry their unit; the RocketMQ name each one
mirrors is in its description so operators coming from a broker.conf can map
them one to one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COORDINATOR_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="libpq URL of a PostgreSQL server. Unset: start the embedded server.",
    )
    data_dir: Path = Field(
        default=Path(".coordinator"),
        description="Where the embedded PostgreSQL keeps its data (only without database_url).",
    )
    host: str = Field(default="127.0.0.1", description="HTTP listen address.")
    port: int = Field(default=8080, ge=0, le=65535, description="HTTP listen port.")

    transaction_timeout_seconds: float = Field(
        default=6.0,
        gt=0,
        description="transactionTimeOut: no check-back before a half message is this old.",
    )
    check_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="transactionCheckInterval: time between two check-backs of one message.",
    )
    check_max: int = Field(
        default=15,
        ge=1,
        description="transactionCheckMax: check-backs before a half message is discarded.",
    )
    retention_hours: float = Field(
        default=72.0,
        gt=0,
        description="fileReservedTime: a half message older than this is expired.",
    )
    max_body_bytes: int = Field(
        default=4 * MIB, gt=0, description="maxMessageSize: largest message body accepted."
    )
    max_properties_bytes: int = Field(
        default=32 * 1024,
        gt=0,
        description="Largest user-property set accepted (UTF-8 bytes of keys and values).",
    )
    max_request_bytes: int = Field(
        default=64 * MIB, gt=0, description="Largest HTTP request body accepted (HTTP 413)."
    )
    max_batch_size: int = Field(
        default=1000, ge=1, description="Most messages accepted in one batch request."
    )
    reject_transactional_messages: bool = Field(
        default=False,
        description="rejectTransactionMessage: refuse half messages (HTTP 403).",
    )
    pool_min_size: int = Field(default=2, ge=1, description="Smallest database pool.")
    pool_max_size: int = Field(default=16, ge=1, description="Largest database pool.")
    group_commit_max_batch: int = Field(
        default=500, ge=1, description="Most single requests committed in one transaction."
    )
    group_commit_max_inflight: int = Field(
        # One at a time measured fastest on 2 cores: requests arriving while a
        # batch commits make the next batch bigger, and fewer, larger
        # transactions leave more CPU to everything else (bench/).
        default=1,
        ge=1,
        description="Group-commit transactions in flight at once, per kind of request.",
    )

    # --- Check-back engine (issue 3) ---
    check_scheduler_enabled: bool = Field(
        default=True,
        description="Run the check-back job in this `coordinator serve` process.",
    )
    check_scan_interval_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often the check-back job looks for due half messages.",
    )
    check_batch_size: int = Field(
        default=200,
        ge=1,
        description="Due half messages claimed per database transaction.",
    )
    max_inflight_dispatches: int = Field(
        default=32,
        ge=1,
        description="Concurrent check-back POSTs to push producers, per process.",
    )
    producer_ttl_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A producer instance not heard from for this long is not live.",
    )
    producer_forget_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="A producer instance not heard from for this long leaves the registry.",
    )
    check_backoff: bool = Field(
        default=False,
        description="Space later check-backs out exponentially instead of every check interval.",
    )
    check_backoff_factor: float = Field(
        default=2.0,
        ge=1,
        le=10,
        description="With check_backoff: each interval is this many times the previous one.",
    )
    check_backoff_max_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="With check_backoff: the longest interval between two check-backs.",
    )
    check_push_secret: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 key signing pushed check requests (X-Coordinator-Signature).",
    )
    check_push_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long a push producer has to answer a pushed check request.",
    )
    check_poll_fallback_seconds: float = Field(
        default=2.0,
        gt=0,
        description="A waiting long poll looks for check requests this often without a wake-up.",
    )

    @property
    def max_check_immunity_seconds(self) -> float:
        # A check immunity longer than retention would expire the message before
        # its first check-back ever ran, so retention is the natural ceiling.
        return self.retention_hours * 3600.0
