"""The coordinator keeps to its own schema, beside an application's tables.

Every test here runs on a database with no search_path default of any kind
(`empty_database`, unlike the migrated test databases): whatever works here,
the coordinator's own connections made work.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.states import Resolution
from tests.factories import TOPIC, end, half

runner = CliRunner()
GROUP = "billing"


def public_objects(url: str) -> set[str]:
    """Every relation and function in public: none of them may be the coordinator's."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "UNION ALL SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
        ).fetchall()
    return {name for (name,) in rows}


def schemas(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname <> 'information_schema'"
        ).fetchall()
    return {name for (name,) in rows}


def an_application(url: str) -> None:
    """An application's own `messages` and Alembic version table, in public."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE messages (id int PRIMARY KEY, note text NOT NULL)")
        conn.execute("INSERT INTO messages VALUES (1, 'the application''s row')")
        conn.execute("CREATE TABLE alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('app_0042')")


APPLICATION = {"messages", "messages_pkey", "alembic_version", "alembic_version_pkey"}


def the_application_is_untouched(url: str) -> None:
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT * FROM public.messages").fetchall() == [
            (1, "the application's row")
        ]
        assert conn.execute("SELECT * FROM public.alembic_version").fetchall() == [("app_0042",)]


async def a_round_trip(url: str, body: bytes) -> list[bytes]:
    """Subscribe, send and commit a transactional message, receive it."""
    async with Coordinator.connect(url) as core:
        await core.delivery.subscribe(GROUP, TOPIC)
        sent = await core.transactions.prepare(half(body=body))
        await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
        return [m.body for m in await core.delivery.receive(GROUP, max_messages=10)]


async def received(url: str) -> list[bytes]:
    async with Coordinator.connect(url) as core:
        return [m.body for m in await core.delivery.receive(GROUP, max_messages=10)]


def test_the_coordinator_migrates_and_works_beside_an_applications_messages_table(
    empty_database: str,
) -> None:
    url = empty_database
    an_application(url)

    result = runner.invoke(app, ["--database-url", url, "db", "upgrade"], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    assert public_objects(url) == APPLICATION
    assert "coordinator" in schemas(url)
    assert migrate.current_revisions(url) == migrate.head_revisions()
    assert asyncio.run(a_round_trip(url, b"order 1")) == [b"order 1"]
    status = runner.invoke(app, ["--database-url", url, "status"], catch_exceptions=False)
    assert status.exit_code == 0, status.output
    assert "committed" in status.output
    the_application_is_untouched(url)


def test_functions_and_triggers_find_their_tables_whatever_the_callers_search_path(
    empty_database: str,
) -> None:
    url = empty_database
    migrate.upgrade(url)
    asyncio.run(a_round_trip(url, b"first"))
    # An operator's plain session, search_path left at "$user", public: the
    # trigger of a hand-written commit still fans out to the group.
    with psycopg.connect(url) as conn:
        conn.execute("SET search_path = public")
        prepared = asyncio.run(_prepare(url, b"by hand"))
        conn.execute(
            "UPDATE coordinator.messages SET state = 'committed', resolved_at = now(), "
            "resolution_source = 'operator' WHERE id = %s",
            [prepared],
        )
        conn.execute(
            "SELECT coordinator.sql92_matches('{\"op\": \"true\"}', NULL, '{}')"
        ).fetchone()
    assert asyncio.run(received(url)) == [b"by hand"]


async def _prepare(url: str, body: bytes) -> int:
    async with Coordinator.connect(url) as core:
        return (await core.transactions.prepare(half(body=body))).offset


def test_an_installation_in_public_moves_into_the_schema_with_its_data_and_back(
    empty_database: str,
) -> None:
    url = empty_database
    migrate.upgrade(url)
    asyncio.run(a_round_trip(url, b"kept"))  # received once: in flight now

    # Revision 0016: everything in public, as coordinators before the schema left it.
    migrate.downgrade(url, "0016")
    assert "coordinator" not in schemas(url)
    assert {"messages", "deliveries", "alembic_version", "messages_changed"} <= public_objects(url)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT body FROM public.messages").fetchall() == [(b"kept",)]
        assert conn.execute("SELECT version_num FROM public.alembic_version").fetchone() == (
            "0016",
        )
        # A message committed while at 0016 (the trigger runs in public).
        conn.execute(
            "INSERT INTO public.messages (message_id, topic, kind, body, state, resolved_at, "
            "resolution_source) VALUES ('m-0016', %s, 'normal', 'at 0016', 'committed', now(), "
            "'operator')",
            [TOPIC],
        )
    assert migrate.current_revisions(url) == ("0016",)

    migrate.upgrade(url)
    assert public_objects(url) == set()
    assert migrate.current_revisions(url) == migrate.head_revisions()
    with psycopg.connect(url) as conn:
        bodies = conn.execute("SELECT body FROM coordinator.messages ORDER BY id").fetchall()
    assert bodies == [(b"kept",), (b"at 0016",)]
    assert asyncio.run(received(url)) == [b"at 0016"]


READ_ONLY_COMMANDS = [
    ("status",),
    ("tx", "show", "1"),
    ("dlq", "list"),
    ("producers",),
    ("subscriptions",),
]


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=lambda c: " ".join(c))
def test_a_read_only_command_refuses_a_database_not_migrated_and_creates_nothing(
    empty_database: str, command: tuple[str, ...]
) -> None:
    url = empty_database
    an_application(url)
    result = runner.invoke(app, ["--database-url", url, *command], catch_exceptions=False)
    assert result.exit_code == 8, result.output
    assert "`coordinator db upgrade`" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert public_objects(url) == APPLICATION
    assert "coordinator" not in schemas(url)
    the_application_is_untouched(url)


def test_a_read_only_command_refuses_a_database_at_an_older_revision(
    empty_database: str,
) -> None:
    url = empty_database
    migrate.upgrade(url, "0016")
    result = runner.invoke(app, ["--database-url", url, "status"], catch_exceptions=False)
    assert result.exit_code == 8, result.output
    assert "is at revision 0016" in result.output
    assert "`coordinator db upgrade` migrates it" in result.output
    assert migrate.current_revisions(url) == ("0016",)


def test_psql_lands_in_the_coordinators_schema(empty_database: str) -> None:
    url = empty_database
    an_application(url)
    migrate.upgrade(url)
    asyncio.run(a_round_trip(url, b"in the schema"))
    # psql writes to the terminal (file descriptors), not to CliRunner's streams.
    command = [sys.executable, "-m", "coordinator", "--database-url", url, "psql"]
    query = ["-At", "-c", "SELECT body FROM messages"]
    answer = subprocess.run([*command, *query], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0, answer.stderr
    # The coordinator's messages, not the application's.
    assert answer.stdout.strip() == "\\x696e2074686520736368656d61"


def test_the_schema_is_a_setting_every_connection_follows(empty_database: str) -> None:
    url = empty_database
    an_application(url)
    environment = {"COORDINATOR_DATABASE_SCHEMA": "mq"}
    upgrade = runner.invoke(app, ["--database-url", url, "db", "upgrade"], env=environment)
    assert upgrade.exit_code == 0, upgrade.output
    assert "mq" in schemas(url) and "coordinator" not in schemas(url)
    assert migrate.current_revisions(url, schema="mq") == migrate.head_revisions()
    # Another schema's coordinator finds nothing of its own here: not migrated.
    refused = runner.invoke(app, ["--database-url", url, "status"], catch_exceptions=False)
    assert refused.exit_code == 8, refused.output

    async def round_trip() -> list[bytes]:
        async with Coordinator.connect(url, Settings(database_schema="mq")) as core:
            await core.delivery.subscribe(GROUP, TOPIC)
            sent = await core.transactions.prepare(half(body=b"in mq"))
            await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
            return [m.body for m in await core.delivery.receive(GROUP, max_messages=10)]

    assert asyncio.run(round_trip()) == [b"in mq"]
    status = runner.invoke(app, ["--database-url", url, "status"], env=environment)
    assert status.exit_code == 0, status.output
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT body FROM mq.messages").fetchall() == [(b"in mq",)]
    assert public_objects(url) == APPLICATION
    the_application_is_untouched(url)


def test_a_role_given_a_schema_by_its_dba_migrates_without_create_on_the_database(
    empty_database: str,
) -> None:
    url = empty_database
    name = f"app_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
        try:
            admin.execute(
                sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(
                    sql.Identifier(admin.info.dbname)
                )
            )
            admin.execute(sql.SQL("CREATE SCHEMA coordinator AUTHORIZATION {}").format(role))
            info = admin.info
            as_app = f"postgresql://{name}@/{info.dbname}?host={info.host}&port={info.port}"
            migrate.upgrade(as_app)
            assert migrate.current_revisions(as_app) == migrate.head_revisions()
            assert asyncio.run(a_round_trip(as_app, b"owned")) == [b"owned"]
        finally:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(role))
            admin.execute(sql.SQL("DROP ROLE {}").format(role))
