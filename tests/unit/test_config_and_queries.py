"""Settings, URLs and the named-query file."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from pydantic import SecretStr

from coordinator.config import Settings, SettingsError
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


@pytest.fixture
def no_coordinator_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in os.environ:
        if name.startswith("COORDINATOR_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_settings_reach_a_worker_process_whole() -> None:
    # `serve --workers N` hands its settings to each worker process pickled.
    original = Settings(
        database_url="postgresql://u:p%40ss@h:5433/db?sslmode=require",
        data_dir=Path("/var/lib/coordinator data"),
        port=9090,
        transaction_timeout_seconds=0.1 + 0.2,  # no short decimal form
        check_max=3,
        retention_hours=1e-3,
        reject_transactional_messages=True,
        check_scheduler_enabled=False,
        check_backoff=True,
        check_backoff_factor=1.5,
        check_push_secret=SecretStr("s3cret with spaces & $igns"),
        tls_cert_file=Path("/etc/coordinator/cert.pem"),
        tls_key_file=Path("/etc/coordinator/key.pem"),
        grpc_port=8081,
    )
    copy = pickle.loads(pickle.dumps(original))
    assert copy == original
    assert copy.check_push_secret.get_secret_value() == "s3cret with spaces & $igns"


def test_overrides_replace_given_values_and_keep_the_rest(
    no_coordinator_environment: pytest.MonkeyPatch,
) -> None:
    base = Settings(check_max=7, check_push_secret=SecretStr("k"))
    # Only the values given count, not what the environment says by now.
    no_coordinator_environment.setenv("COORDINATOR_CHECK_MAX", "3")
    changed = base.with_overrides(port=9000, check_max=None, retention_hours=1.5)
    assert (changed.port, changed.check_max, changed.retention_hours) == (9000, 7, 1.5)
    assert changed.check_push_secret == SecretStr("k")
    assert base.port == 8080  # the original is untouched


def test_overrides_are_validated() -> None:
    with pytest.raises(SettingsError) as refused:
        Settings().with_overrides(check_max=0, port=70000, host="0.0.0.0")
    assert {p.field for p in refused.value.problems} == {"check_max", "port"}
    assert "check_max=0: input should be greater than or equal to 1" in str(refused.value)
    assert "--port=70000" in refused.value.explain({"port": "--port"})
    with pytest.raises(TypeError, match="not settings: colour"):
        Settings().with_overrides(colour="blue")


def test_a_wrong_variable_is_named_in_the_error(
    no_coordinator_environment: pytest.MonkeyPatch,
) -> None:
    no_coordinator_environment.setenv("COORDINATOR_RETENTION_HOURS", "soon")
    with pytest.raises(SettingsError, match="COORDINATOR_RETENTION_HOURS='soon'"):
        Settings.from_environment()


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
    assert all(q.text and not q.text.endswith(";") for q in queries.values())
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")


@pytest.mark.parametrize(
    "schema", ["Coordinator", "my-schema", "1mq", "public", "pg_mq", "information_schema", "x" * 64]
)
def test_the_database_schema_is_a_plain_name_of_the_coordinators_own(schema: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings().with_overrides(database_schema=schema)
    assert {p.field for p in refused.value.problems} == {"database_schema"}


def test_every_coordinator_url_starts_its_sessions_in_the_schema() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from coordinator.db.urls import in_schema, out_of_schema, sqlalchemy_url

    assert Settings().database_schema == "coordinator"
    plain = "postgresql://u:p@h1:5432,h2:5432/db?target_session_attrs=read-write"
    url = in_schema(plain, "mq")
    assert conninfo_to_dict(url)["options"] == "-c search_path=mq"
    assert "search_path%3Dmq" in sqlalchemy_url(url)
    assert in_schema(url, "mq") == url  # once
    assert out_of_schema(url) == plain
    timeout = in_schema("postgresql://h/db?options=-c%20statement_timeout%3D5", "mq")
    assert conninfo_to_dict(timeout)["options"] == "-c statement_timeout=5 -c search_path=mq"
    own = "postgresql://h/db?options=-c%20search_path%3Dmine"
    assert in_schema(own, "mq") == own  # the URL's own search_path wins


def test_the_schema_leaves_a_plus_in_the_url_as_libpq_reads_it() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from coordinator.db.urls import in_schema, out_of_schema

    # libpq reads `+` in a URL as a plus sign, not as an HTML form's space.
    plain = "postgresql://u@h/db?password=a+b&application_name=x+y"
    url = in_schema(plain, "mq")
    assert conninfo_to_dict(url)["password"] == conninfo_to_dict(plain)["password"] == "a+b"
    assert conninfo_to_dict(out_of_schema(url))["application_name"] == "x+y"
