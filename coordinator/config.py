"""Settings with RocketMQ's broker defaults, read from COORDINATOR_* variables.

Names say what they are and carry their unit; the RocketMQ name each one
mirrors is in its description so operators coming from a broker.conf can map
them, one to one but for the check interval (see check_interval_seconds).

Long on purpose: one class holds every setting, so the environment's names,
`coordinator config show` and docs/configuration.md (a test compares them)
all read one list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coordinator.domain.check_urls import DEFAULT_MAX_AGE_SECONDS, DEFAULT_MAX_CHECK_ANSWER_BYTES
from coordinator.domain.database_urls import redact
from coordinator.domain.delivery_time import DEFAULT_MAX_DELAY_SECONDS
from coordinator.domain.hosts import host_patterns
from coordinator.domain.immunity import longest_check_immunity
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS

MIB = 1024 * 1024
ENV_PREFIX = "COORDINATOR_"
# What libpq and SQLAlchemy both read as a PostgreSQL server (Alembic needs a URL).
POSTGRESQL_URL = re.compile(r"^(postgres|postgresql)(\+\w+)?://")
# The settings that are database URLs: shown anywhere only with their password hidden.
DATABASE_URLS = ("database_url", "read_database_url")
# The PostgreSQL schema that holds every object of the coordinator.
DEFAULT_DATABASE_SCHEMA = "coordinator"
# A name used unquoted in SQL and in search_path: lower case, no quoting
# needed, at most 63 bytes (NAMEDATALEN); pg_ names are the system's.
DATABASE_SCHEMA_PATTERN = r"^[a-z_][a-z0-9_]{0,62}$"


def env_name(field: str) -> str:
    """The environment variable a setting is read from."""
    return f"{ENV_PREFIX}{field.upper()}"


@dataclass(frozen=True)
class SettingsProblem:
    field: str
    value: Any
    message: str


class SettingsError(ValueError):
    """Settings that do not validate: each wrong value with what is wrong with it."""

    def __init__(self, problems: list[SettingsProblem], names: Mapping[str, str] | None = None):
        self.problems = tuple(problems)
        super().__init__(self.explain(names or {}))

    @classmethod
    def from_validation(
        cls, error: ValidationError, names: Mapping[str, str] | None = None
    ) -> SettingsError:
        problems = [
            SettingsProblem(field, _shown(field, e["input"]), e["msg"])
            for e in error.errors()
            for field in [".".join(map(str, e["loc"]))]
        ]
        return cls(problems, names)

    def explain(self, names: Mapping[str, str]) -> str:
        """One sentence, each setting called what the user wrote (a flag, a variable)."""
        return "; ".join(
            f"{names.get(p.field, p.field)}={p.value!r}: {p.message[:1].lower()}{p.message[1:]}"
            for p in self.problems
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="libpq URL of a PostgreSQL server. Unset: start the embedded server.",
    )
    read_database_url: str | None = Field(
        default=None,
        description="libpq URL the overview (status page, /v1/overview, /metrics' database "
        "gauges, `coordinator status`) and the pipeline's report and audit read from: a "
        "standby, typically with target_session_attrs=prefer-standby. Unset: database_url.",
    )
    database_schema: str = Field(
        default=DEFAULT_DATABASE_SCHEMA,
        pattern=DATABASE_SCHEMA_PATTERN,
        description="The PostgreSQL schema of the coordinator's tables, views and functions, "
        "created if missing; every connection of the coordinator sets its search_path to it. "
        "A plain lower-case identifier.",
    )
    data_dir: Path = Field(
        default=Path(".coordinator"),
        # The default too becomes absolute (see _absolute).
        validate_default=True,
        description="Where the embedded PostgreSQL keeps its data (only without database_url).",
    )
    host: str = Field(default="127.0.0.1", description="HTTP listen address.")
    port: int = Field(default=8080, ge=0, le=65535, description="HTTP listen port.")
    grpc_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of the RocketMQ 5 gRPC door, on the HTTP listen address; unset: no gRPC.",
    )

    transaction_timeout_seconds: float = Field(
        default=6.0,
        gt=0,
        description="transactionTimeOut: no check-back before a half message is this old.",
    )
    check_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Time between two check-backs of one message (RocketMQ's "
        "transactionCheckInterval is how often the broker scans instead).",
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
    max_delay_seconds: float = Field(
        default=DEFAULT_MAX_DELAY_SECONDS,
        gt=0,
        description="timerMaxDelaySec: furthest delivery time of a delay or timer message, "
        "in seconds from its send.",
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
    pool_timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        le=300,
        description="How long a request waits for a database connection before it is "
        "answered 503 database_unavailable (PostgreSQL down or restarting).",
    )
    database_deadline_seconds: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="The longest a request waits on the database, for a connection and on "
        "it; then it is answered 503 database_unavailable and its connection is closed (not "
        "cancelled): a frozen, cut-off or failing-over server costs at most this.",
    )
    synchronous_commit: Literal["on", "remote_apply", "remote_write", "local", "off"] = Field(
        default="on",
        description="PostgreSQL's synchronous_commit, pinned on the coordinator's sessions: "
        "with a synchronous standby, `on` acknowledges a write once the standby has it. "
        "Lower levels trade that for speed and may lose acknowledged messages at failover.",
    )
    group_commit_max_batch: int = Field(
        default=500, ge=1, description="Most single requests committed in one transaction."
    )
    group_commit_max_inflight: int = Field(
        # One at a time measured fastest on 2 cores: requests arriving while a
        # batch commits make the next batch bigger, and fewer, larger
        # transactions leave more CPU to everything else (bench/). Shared by
        # the kinds, so a send's batch waits for an end's and grows meanwhile.
        default=1,
        ge=1,
        description="Group-commit transactions in flight at once, shared by prepares, sends "
        "and ends.",
    )
    group_commit_linger_seconds: float = Field(
        # 2 ms measured on 2 cores (bench/grpc_ab.py): a third fewer transactions
        # per message at 16 producers, less CPU in the process and in Postgres.
        default=0.002,
        ge=0,
        le=0.1,
        description="How long a group-commit batch may wait to gather as many concurrent "
        "requests as the previous batch held (0: never waits; a lone request never waits).",
    )

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
    check_source_key: SecretStr | None = Field(
        default=None,
        description="Key encrypting check sources' database passwords (a Fernet key, or any "
        "passphrase); unset: the key in check_source_key_file. Every node needs the same key.",
    )
    check_source_key_file: Path | None = Field(
        default=None,
        description="File holding the check sources' key without check_source_key, created "
        "(mode 0600) when missing; unset: check-source.key in data_dir.",
    )
    check_push_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How long a push producer has to answer a pushed check request.",
    )
    max_check_answer_bytes: int = Field(
        default=DEFAULT_MAX_CHECK_ANSWER_BYTES,
        ge=1,
        description="Largest answer read from a check URL, as sent and decoded; "
        "a larger one is a failed push.",
    )
    check_push_max_age_seconds: float = Field(
        default=DEFAULT_MAX_AGE_SECONDS,
        gt=0,
        description="A push producer refuses a signed check request older than this (replays).",
    )
    check_poll_fallback_seconds: float = Field(
        default=2.0,
        gt=0,
        description="A waiting long poll looks for check requests this often without a wake-up.",
    )

    # --- Retention (docs/operations.md "Retention") ---
    retention_enabled: bool = Field(
        default=True,
        description="Run the retention job in this `coordinator serve` process.",
    )
    retention_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the retention job starts a round.",
    )
    retention_batch_size: int = Field(
        default=1000,
        ge=1,
        description="Rows the retention job deletes per database transaction.",
    )
    resolved_retention_hours: float | None = Field(
        default=None,
        gt=0,
        description="A resolved message (rolled back, discarded, expired, or committed and "
        "acked by every consumer group) is deleted this long after its resolution. "
        "Unset: retention_hours.",
    )
    unacked_retention_hours: float = Field(
        default=72.0,
        gt=0,
        description="fileReservedTime: a delivery a consumer group has not acked is dropped "
        "this long after its commit.",
    )
    dead_letter_retention_hours: float = Field(
        default=168.0,
        gt=0,
        description="A dead letter is deleted this long after it died.",
    )
    duplicate_window_hours: float | None = Field(
        default=None,
        gt=0,
        description="A message is kept at least this long after its resolution (so after "
        "its birth too): a producer retrying its id within it gets the stored message back. "
        "Unset: the resolved retention.",
    )
    idle_consumer_group_hours: float = Field(
        default=168.0,
        gt=0,
        description="A consumer group that has not received for this long is idle "
        "(reported; removed with remove_idle_consumer_groups).",
    )
    remove_idle_consumer_groups: bool = Field(
        default=False,
        description="The retention job removes idle consumer groups: their subscriptions "
        "and pending deliveries.",
    )
    archive_dir: Path | None = Field(
        default=None,
        description="Archive first: retention leaves messages to `coordinator pipeline "
        "archive`, which deletes them once a verified run holds them (the archive "
        "directory it writes to; unset: retention deletes messages itself).",
    )

    # --- Logs ---
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="Server log lines: JSON objects (json), text (text), or JSON unless stderr "
        "is a terminal (auto).",
    )
    access_log: bool = Field(
        default=True,
        description="`coordinator serve` logs a line per HTTP request and gRPC call.",
    )

    # --- Security and limits ---
    insecure: bool = Field(
        default=False,
        description="Serve without tokens on a non-loopback address (refused otherwise).",
    )
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Host names the HTTP door answers besides loopback ones (comma-separated: "
        "`coord.example.com`, `*.example.com`, `10.0.0.5`, or `*` for any). Unset: any Host "
        "while authentication is on, loopback names only while it is off.",
    )
    metrics_open: bool = Field(
        default=False,
        description="Serve /metrics without a token (otherwise a token with `metrics` or `admin`).",
    )
    tls_cert_file: Path | None = Field(
        default=None, description="PEM certificate: serve HTTPS (with tls_key_file)."
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of tls_cert_file.")
    max_long_poll_seconds: float = Field(
        default=LONGEST_POLL_SECONDS,
        gt=0,
        le=LONGEST_POLL_SECONDS,
        description="Longest wait of a long poll (receive, check requests); "
        f"at most {LONGEST_POLL_SECONDS:g}.",
    )
    max_long_polls_per_token: int = Field(
        default=64,
        ge=1,
        description="Long polls one token may hold open at once, over HTTP and gRPC together; "
        "an open gRPC Telemetry stream holds one (HTTP 429, TOO_MANY_REQUESTS).",
    )
    max_topics_per_stream: int = Field(
        default=64,
        ge=1,
        description="Topics one gRPC Telemetry stream may announce: a producer's topics, or a "
        "consumer's subscriptions (BAD_REQUEST).",
    )
    max_subscriptions_per_group: int = Field(
        default=100,
        ge=1,
        description="Topics one consumer group may subscribe to (HTTP 400, BAD_REQUEST).",
    )
    max_metric_label_values: int = Field(
        default=1000,
        ge=1,
        description="Series per /metrics metric labelled by group (and topic); the rest are "
        "summed into one series labelled `_other`.",
    )
    rate_limit_per_second: float = Field(
        # Above what one process serves on small machines: the limit stops a
        # runaway client, not a busy service sharing one token.
        default=10000.0,
        ge=0,
        description="Requests per second one token may make, sustained (HTTP 429); 0: no limit.",
    )
    rate_limit_burst: int = Field(
        default=20000, ge=1, description="Requests one token may make at once above the rate."
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="Open connections per process on each door: one more HTTP connection is "
        "answered 429 and closed, one more gRPC connection is closed at once.",
    )
    request_read_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="How long a request (its headers and body) may take to arrive, "
        "from its first byte or the connection's start; later it is answered 408 and closed.",
    )
    grpc_handshake_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="How long a new gRPC connection may take to send its HTTP/2 preface and "
        "settings (and finish TLS); later it is closed.",
    )
    grpc_idle_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How long a gRPC connection may stay open without a call in progress; "
        "then it is closed (GOAWAY), and a client reconnects when it next calls.",
    )
    token_refresh_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often a server rereads the tokens without being notified of a change.",
    )

    @field_validator("database_url", "read_database_url")
    @classmethod
    def _postgresql_url(cls, url: str | None) -> str | None:
        if not url:  # an empty variable means unset, as libpq reads it
            return None
        if not POSTGRESQL_URL.match(url):
            raise ValueError("not a PostgreSQL URL: give postgresql://USER@HOST:PORT/DATABASE")
        try:
            # What libpq will read, multi-host forms included; a SQLAlchemy
            # driver suffix is not libpq's and is dropped for the check only.
            conninfo_to_dict(POSTGRESQL_URL.sub("postgresql://", url, count=1))
        except psycopg.ProgrammingError as error:
            reason = " ".join(str(error).split()) or "malformed"
            raise ValueError(f"not a URL libpq can read: {redact(reason)}") from None
        return url

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _host_patterns(cls, value: object) -> tuple[str, ...]:
        # The environment gives one string (COORDINATOR_ALLOWED_HOSTS=a,b), a
        # config file a list: both become the same checked, lower-case tuple.
        return host_patterns(value)

    @field_validator("database_schema")
    @classmethod
    def _not_a_system_schema(cls, value: str) -> str:
        if value.startswith("pg_") or value in {"public", "information_schema"}:
            raise ValueError("a schema of the coordinator's own, not public or a system schema")
        return value

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        # Resolved once, against the directory the process starts in: a
        # relative path carried around would name another database wherever a
        # later step (a worker, a command run elsewhere) looked it up.
        return path.expanduser().resolve()

    @property
    def max_check_immunity_seconds(self) -> float:
        # A longer immunity would leave no check-back before the message
        # expires at the retention (domain/immunity.py).
        return longest_check_immunity(self.retention_hours * 3600.0, self.check_interval_seconds)

    @classmethod
    def from_environment(cls, **values: Any) -> Self:
        """Settings from COORDINATOR_* variables, `values` taking precedence.

        A wrong value raises SettingsError naming its variable.
        """
        try:
            return cls(**values)
        except ValidationError as error:
            names = {field: env_name(field) for field in cls.model_fields}
            raise SettingsError.from_validation(error, names) from None

    def with_overrides(self, **overrides: Any) -> Self:
        """These settings with some values replaced, all validated again.

        None means "not given" (a CLI flag left out) and keeps the value; a
        wrong value raises SettingsError.
        """
        unknown = overrides.keys() - type(self).model_fields.keys()
        if unknown:
            raise TypeError(f"not settings: {', '.join(sorted(unknown))}")
        changes = {field: value for field, value in overrides.items() if value is not None}
        try:
            # Every field is passed, so no environment variable can creep back in.
            return type(self).model_validate({**self.model_dump(), **changes})
        except ValidationError as error:
            raise SettingsError.from_validation(error) from None


def _shown(field: str, value: Any) -> Any:
    """A wrong value as an error message may show it: never a password."""
    if field in DATABASE_URLS and isinstance(value, str):
        return redact(value)
    if field in ("check_push_secret", "check_source_key"):
        return "***"
    return value
