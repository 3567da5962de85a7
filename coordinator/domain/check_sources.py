"""Check sources: a producer group's own database, which answers its check-backs.

A producer group that keeps a barrier table (the SDK's `Barrier`) in its
PostgreSQL database may register that database as its check source; the
coordinator then decides the group's check-backs itself with the barrier's
rule. The URL is a URL the coordinator connects to from inside its network,
so it is held to the check URLs' rules (`check_urls.forbidden_address`): no
link-local or metadata address, no unspecified, multicast or broadcast one,
at registration and again on every address its host resolves to at each
check. Its password is split off here: it is stored apart, encrypted, and
never shown (`masked`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from coordinator.domain.check_urls import CHECK_URL_MAX_LENGTH, forbidden_host
from coordinator.domain.errors import InvalidMessage

DEFAULT_BARRIER_TABLE = "coordinator_barrier"
# The SDK barrier's own rule: a table name or schema.table, plain identifiers.
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$")
_SCHEMES = ("postgresql", "postgres")
# A DNS name (IDNs in their xn-- form) or an IP address (IPv6 in brackets in the URL).
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^[0-9A-Fa-f:.]+$")
# Connection parameters a URL may carry. Others could make the coordinator
# read its own files (sslkey, passfile, service) or go elsewhere (host,
# hostaddr): refused with a sentence.
_ALLOWED_PARAMETERS = frozenset({"sslmode", "application_name", "sslcompression", "gssencmode"})


class CheckSourceMode(StrEnum):
    """When the database answers the group's check-backs."""

    FALLBACK = "fallback"  # only while the group has no live producer instance
    ONLY = "only"  # every check-back of the group


@dataclass(frozen=True, slots=True)
class SourceUrl:
    """A check source's URL taken apart: what is stored in clear, and its password."""

    url: str  # without its password: the stored, listed form
    password: str | None
    host: str
    port: int


def check_source_url(database_url: str) -> SourceUrl:
    """Check a libpq URL for a check source; raise InvalidMessage with a sentence."""
    if not isinstance(database_url, str) or not database_url:
        raise InvalidMessage("database_url must be a postgresql:// URL")
    if len(database_url) > CHECK_URL_MAX_LENGTH:
        raise InvalidMessage(f"database_url is longer than {CHECK_URL_MAX_LENGTH} characters")
    if not database_url.isprintable() or "%00" in database_url:
        raise InvalidMessage("database_url must not contain control characters")
    try:
        parts = urlsplit(database_url)
        port = parts.port or 5432
    except ValueError:
        raise InvalidMessage("database_url is not a URL") from None
    if parts.scheme not in _SCHEMES:
        raise InvalidMessage("database_url must be a postgresql:// URL")
    host = (parts.hostname or "").rstrip(".")
    if not host or "," in parts.netloc.rpartition("@")[2] or not _HOST.match(host):
        raise InvalidMessage(
            "database_url must name one TCP host: a DNS name (international names in their "
            "xn-- form) or an IP address; no socket directory"
        )
    reason = forbidden_host(host)
    if reason is not None:
        raise InvalidMessage(f"database_url {reason}; the coordinator does not connect to it")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise InvalidMessage("database_url must name its database (postgresql://HOST/DATABASE)")
    parameters = parse_qsl(parts.query, keep_blank_values=True)
    for name, _ in parameters:
        if name == "password":
            raise InvalidMessage("give the password in the URL (postgresql://USER:PASSWORD@HOST)")
        if name not in _ALLOWED_PARAMETERS:
            allowed = ", ".join(sorted(_ALLOWED_PARAMETERS))
            raise InvalidMessage(
                f"database_url parameter {name!r} is not allowed (allowed: {allowed})"
            )
    user = unquote(parts.username) if parts.username else None
    if not user:
        raise InvalidMessage("database_url must name its user (postgresql://USER@HOST/DATABASE)")
    password = unquote(parts.password) if parts.password is not None else None
    netloc_host = f"[{host}]" if ":" in host else host
    url = f"postgresql://{quote(user, safe='')}@{netloc_host}:{port}/{quote(database, safe='')}"
    if parameters:
        url += "?" + urlencode(parameters)
    return SourceUrl(url=url, password=password or None, host=host, port=port)


def masked(url: str, has_password: bool) -> str:
    """The stored URL as shown: `***` where its password goes."""
    if not has_password:
        return url
    scheme, _, rest = url.partition("://")
    user, _, location = rest.partition("@")
    return f"{scheme}://{user}:***@{location}"


def check_barrier_table(table: str) -> str:
    if not isinstance(table, str) or not _IDENTIFIER.match(table):
        raise InvalidMessage(
            f"barrier_table {str(table)[:80]!r} must be a plain lower-case SQL identifier "
            "(table or schema.table)"
        )
    return table


def check_mode(mode: str) -> CheckSourceMode:
    try:
        return CheckSourceMode(mode)
    except ValueError:
        modes = ", ".join(m.value for m in CheckSourceMode)
        raise InvalidMessage(f"mode {str(mode)[:40]!r} is not one of: {modes}") from None


@dataclass(frozen=True, slots=True)
class CheckSource:
    """A registered check source as the coordinator shows it (never its password)."""

    producer_group: str
    url: str  # masked: `***` for the password
    barrier_table: str
    mode: CheckSourceMode
    created_at: datetime
    updated_at: datetime
    last_check_at: datetime | None
    last_ok: bool | None
    last_error: str | None
    consecutive_failures: int


@dataclass(frozen=True, slots=True)
class BarrierAnswer:
    """What one database check found: the barrier's outcome, or why it could not tell."""

    committed: bool | None  # None: the check failed
    detail: str
