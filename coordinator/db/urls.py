"""Database URLs: users give libpq URLs; SQLAlchemy (Alembic) wants its dialect prefix."""

from __future__ import annotations

import re

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from coordinator.config import POSTGRESQL_URL

# The user and the password of a URL's authority: `://user:password@`.
_PASSWORD = re.compile(r"://([^:/@?#]*):([^@/?#]*)@")


def libpq_url(url: str) -> str:
    """The URL psycopg and psql understand (no SQLAlchemy driver suffix, no empty password)."""
    url = POSTGRESQL_URL.sub("postgresql://", url, count=1)
    # pgserver's URLs say `postgres:@`: an empty password is no password.
    return _PASSWORD.sub(lambda m: m.group(0) if m.group(2) else f"://{m.group(1)}@", url)


def sqlalchemy_url(url: str) -> str:
    """The same server for SQLAlchemy, always through psycopg 3."""
    if not POSTGRESQL_URL.match(url):
        raise ValueError(f"not a PostgreSQL URL: {redact(url)}")
    return POSTGRESQL_URL.sub("postgresql+psycopg://", url, count=1)


def redact(url: str) -> str:
    """The URL with its password hidden, for logs and error messages; no password, no mask."""
    return _PASSWORD.sub(
        lambda m: f"://{m.group(1)}:***@" if m.group(2) else f"://{m.group(1)}@", url
    )


def psql_arguments(url: str) -> tuple[list[str], dict[str, str]]:
    """psql's arguments for the database at `url`, and the environment for its password.

    The password travels in PGPASSWORD, not on a command line anyone can
    read in the process list.
    """
    params = conninfo_to_dict(libpq_url(url))
    password = params.pop("password", None)
    environment = {"PGPASSWORD": str(password)} if password else {}
    return ["--dbname", make_conninfo(**params)], environment
