"""Settings with RocketMQ's broker defaults, read from COORDINATOR_* variables.

Names say what they are and carry their unit; the RocketMQ name each one
mirrors is in its description so operators coming from a broker.conf can map
them one to one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
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

    @property
    def max_check_immunity_seconds(self) -> float:
        # A check immunity longer than retention would expire the message before
        # its first check-back ever ran, so retention is the natural ceiling.
        return self.retention_hours * 3600.0
