"""Database URLs: users give libpq URLs; SQLAlchemy (Alembic) wants its dialect prefix."""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^(postgres|postgresql)(\+\w+)?://")


def libpq_url(url: str) -> str:
    """The URL psycopg and psql understand (no SQLAlchemy driver suffix)."""
    return _SCHEME.sub("postgresql://", url, count=1)


def sqlalchemy_url(url: str) -> str:
    """The same server for SQLAlchemy, always through psycopg 3."""
    if not _SCHEME.match(url):
        raise ValueError(f"not a PostgreSQL URL: {redact(url)}")
    return _SCHEME.sub("postgresql+psycopg://", url, count=1)


def redact(url: str) -> str:
    """The URL with its password hidden, for logs and error messages."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
