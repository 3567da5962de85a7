"""Settings, URLs and the named-query file."""

from __future__ import annotations

import pytest

from coordinator.config import Settings
from coordinator.db.queries import all_queries, parse_queries
from coordinator.db.urls import libpq_url, redact, sqlalchemy_url


def test_defaults_are_rocketmqs() -> None:
    settings = Settings()
    assert settings.transaction_timeout_seconds == 6.0
    assert settings.check_interval_seconds == 60.0
    assert settings.check_max == 15
    assert settings.retention_hours == 72.0
    assert settings.max_body_bytes == 4 * 1024 * 1024
    assert settings.reject_transactional_messages is False
    assert settings.database_url is None


def test_environment_variables_override_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATOR_CHECK_MAX", "3")
    monkeypatch.setenv("COORDINATOR_REJECT_TRANSACTIONAL_MESSAGES", "true")
    monkeypatch.setenv("COORDINATOR_DATABASE_URL", "postgresql://u@h/db")
    settings = Settings()
    assert settings.check_max == 3
    assert settings.reject_transactional_messages is True
    assert settings.database_url == "postgresql://u@h/db"


def test_invalid_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COORDINATOR_CHECK_MAX", "0")
    with pytest.raises(ValueError, match="check_max"):
        Settings()


def test_urls_convert_between_libpq_and_sqlalchemy() -> None:
    assert sqlalchemy_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    assert sqlalchemy_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert libpq_url("postgresql+psycopg://u@h/db") == "postgresql://u@h/db"
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        sqlalchemy_url("mysql://u@h/db")


def test_named_queries_parse_and_names_are_unique() -> None:
    queries = all_queries()
    assert {"insert_messages", "end_transactions", "get_history"} <= queries.keys()
    assert all(q and not q.endswith(";") for q in queries.values())
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
