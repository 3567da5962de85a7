"""The read-only group role `coordinator_reader` (migration 0008).

A login role that is a member of it reads the documented views and nothing
else: no table (so no message body), no write, no CREATE. Roles are
cluster-wide and every test database of the server is a copy of one
migrated template, so each test makes a login role of its own and drops it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.states import Resolution
from tests.conftest import url_for
from tests.factories import GROUP, TOPIC, end, half
from tests.own_postgres import own_postgres

READER = "coordinator_reader"

# The views of docs/sql.md, check-back.md and consuming.md that people
# query. archivable_messages is documented too, but as the archive's
# definition of what it may take, and it returns messages.* (bodies
# included), so the reader does not get it.
DOCUMENTED_VIEWS = (
    "pending_transactions",
    "message_counts",
    "message_timeline",
    "check_backs",
    "consumer_lag",
)

SECRET = b"card 4111-1111-1111-1111"

TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@pytest.fixture
def reader(postgresql: psycopg.Connection, db: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """A connection as a new login role whose only right is membership of the reader."""
    name = f"reader_test_{uuid.uuid4().hex[:12]}"
    role = sql.Identifier(name)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(role, sql.Identifier(READER)))
    try:
        info = postgresql.info
        # Autocommit: each refused statement is checked on its own, not in an
        # aborted transaction.
        with psycopg.connect(
            url_for(info.host, info.port, name, info.dbname), autocommit=True
        ) as conn:
            yield conn
    finally:
        # Roles outlive the test's database: leave none behind.
        db.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))


def _coordinator_relations(db: psycopg.Connection, kinds: str) -> list[str]:
    rows = db.execute(
        "SELECT relname FROM pg_class "
        "WHERE relnamespace = 'coordinator'::regnamespace AND relkind = ANY(%s) ORDER BY 1",
        (list(kinds),),
    ).fetchall()
    return [name for (name,) in rows]


def _refused(conn: psycopg.Connection, statement: str | sql.Composable) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement)


def _reader_grants(db: psycopg.Connection) -> set[tuple[str, str]]:
    """(object, privilege) granted to the reader role itself in this database."""
    rows = db.execute(
        """
        SELECT c.relname, a.privilege_type
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.relnamespace IN ('public'::regnamespace, to_regnamespace('coordinator'))
          AND a.grantee = %(role)s::regrole
        UNION ALL
        SELECT 'schema ' || n.nspname, a.privilege_type
        FROM pg_namespace n, aclexplode(n.nspacl) a
        WHERE a.grantee = %(role)s::regrole
        """,
        {"role": READER},
    ).fetchall()
    return set(rows)


def _expected_grants() -> set[tuple[str, str]]:
    return {(view, "SELECT") for view in DOCUMENTED_VIEWS} | {("schema coordinator", "USAGE")}


@pytest.mark.anyio
async def test_the_reader_sees_every_documented_view_with_rows(
    core: Coordinator, db: psycopg.Connection, reader: psycopg.Connection
) -> None:
    # Something in every view: a committed message delivered to a
    # subscription (consumer_lag), and a pending one with a check request.
    db.execute(
        "INSERT INTO subscriptions (consumer_group, topic, expression) VALUES ('billing', %s, '*')",
        (TOPIC,),
    )
    committed = await core.transactions.prepare(half(body=SECRET))
    await core.transactions.end(end(committed.transaction_id, Resolution.COMMIT))
    pending = await core.transactions.prepare(half(body=SECRET))
    db.execute(
        "INSERT INTO check_requests (message_offset, producer_group, status, check_count) "
        "VALUES (%s, %s, 'no_producer', 1)",
        (pending.offset, GROUP),
    )

    for view in DOCUMENTED_VIEWS:
        (count,) = reader.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(view))
        ).fetchone()
        assert count > 0, view

    assert reader.execute("SELECT transaction_id FROM pending_transactions").fetchall() == [
        (pending.transaction_id,)
    ]
    assert reader.execute("SELECT transaction_id, status FROM check_backs").fetchall() == [
        (pending.transaction_id, "no_producer")
    ]
    assert reader.execute("SELECT consumer_group, topic, lag FROM consumer_lag").fetchall() == [
        ("billing", TOPIC, 1)
    ]
    timeline = reader.execute(
        "SELECT to_state FROM message_timeline WHERE transaction_id = %s ORDER BY history_id",
        (committed.transaction_id,),
    ).fetchall()
    assert timeline == [("prepared",), ("committed",)]

    # No row of any readable view carries the body, as text or as bytea.
    for view in DOCUMENTED_VIEWS:
        (leaks,) = reader.execute(
            sql.SQL("SELECT count(*) FROM {} v WHERE v::text LIKE %s OR v::text LIKE %s").format(
                sql.Identifier(view)
            ),
            (f"%{SECRET.decode()}%", f"%{SECRET.hex()}%"),
        ).fetchone()
        assert leaks == 0, view


def test_no_readable_view_is_built_on_message_bodies(db: psycopg.Connection) -> None:
    # Lineage from the catalog: which views use messages.body (or the other
    # producer-supplied payload columns) anywhere, their output included.
    rows = db.execute(
        "SELECT DISTINCT view_name FROM information_schema.view_column_usage "
        "WHERE table_schema = 'coordinator' AND table_name = 'messages' "
        "AND column_name IN ('body', 'properties', 'keys')"
    ).fetchall()
    assert {name for (name,) in rows} == {"archivable_messages"}


def test_the_reader_holds_select_on_the_documented_views_and_nothing_else(
    db: psycopg.Connection, reader: psycopg.Connection
) -> None:
    assert _reader_grants(db) == _expected_grants()

    # Everything the login role can do, by any path (the reader, PUBLIC).
    effective = set(
        reader.execute(
            """
            SELECT c.relname, p
            FROM pg_class c, unnest(%s::text[]) p
            WHERE c.relnamespace IN ('public'::regnamespace, 'coordinator'::regnamespace)
              AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
              AND has_table_privilege(c.oid, p)
            UNION ALL
            SELECT c.relname, p
            FROM pg_class c, unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) p
            WHERE c.relnamespace IN ('public'::regnamespace, 'coordinator'::regnamespace)
              AND c.relkind = 'S'
              AND has_sequence_privilege(c.oid, p)
            """,
            (list(TABLE_PRIVILEGES),),
        ).fetchall()
    )
    assert effective == {(view, "SELECT") for view in DOCUMENTED_VIEWS}
    # No column-level grant either (SELECT (body) ON messages would be one).
    (columns,) = reader.execute(
        "SELECT count(*) FROM pg_class c "
        "WHERE c.relnamespace IN ('public'::regnamespace, 'coordinator'::regnamespace) "
        "AND c.relkind IN ('r', 'p') "
        "AND has_any_column_privilege(c.oid, 'SELECT, INSERT, UPDATE, REFERENCES')"
    ).fetchone()
    assert columns == 0
    assert reader.execute(
        "SELECT has_schema_privilege('coordinator', 'USAGE'),"
        " has_schema_privilege('coordinator', 'CREATE'), has_schema_privilege('public', 'CREATE'),"
        " has_database_privilege(current_database(), 'CREATE')"
    ).fetchone() == (True, False, False, False)
    (can_login,) = db.execute(
        "SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (READER,)
    ).fetchone()
    assert can_login is False


def test_the_reader_cannot_read_any_table_nor_the_archive_view(
    db: psycopg.Connection, reader: psycopg.Connection
) -> None:
    _refused(reader, "SELECT body FROM messages")
    _refused(reader, "SELECT body FROM archivable_messages")
    tables = _coordinator_relations(db, "rp")
    assert {"messages", "message_history", "api_tokens", "alembic_version"} <= set(tables)
    for table in [*tables, "archivable_messages"]:
        _refused(reader, sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier(table)))
    for sequence in _coordinator_relations(db, "S"):
        _refused(reader, sql.SQL("SELECT nextval({})").format(sql.Literal(sequence)))


def test_the_reader_can_write_nothing(db: psycopg.Connection, reader: psycopg.Connection) -> None:
    _refused(
        reader,
        "INSERT INTO messages (message_id, kind, topic, body, state) "
        "VALUES ('x', 'normal', 'orders', 'x', 'committed')",
    )
    _refused(reader, "UPDATE messages SET state = 'committed'")
    _refused(reader, "DELETE FROM message_history")
    _refused(reader, "INSERT INTO api_tokens (name, secret_sha256, admin) VALUES ('me', 'x', true)")
    for table in _coordinator_relations(db, "rp"):
        _refused(reader, sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
        _refused(reader, sql.SQL("TRUNCATE {}").format(sql.Identifier(table)))
    # pending_transactions is a simple, automatically updatable view: only
    # the missing grant stops a write through it to messages.
    _refused(reader, "UPDATE pending_transactions SET check_count = 0")
    _refused(reader, "DELETE FROM pending_transactions")


def test_the_reader_cannot_create_anything(reader: psycopg.Connection) -> None:
    # Unqualified too: with no schema of its own, public is where it would go.
    _refused(reader, "CREATE TABLE mine (id int)")
    _refused(reader, "CREATE TABLE public.mine (id int)")
    _refused(reader, "CREATE VIEW public.mine AS SELECT 1")
    _refused(reader, "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    _refused(reader, "CREATE TABLE coordinator.mine (id int)")
    _refused(reader, "CREATE SCHEMA mine")


def test_downgrade_to_0007_takes_the_grants_and_upgrade_restores_them(
    database_url: str, db: psycopg.Connection, reader: psycopg.Connection
) -> None:
    reader.execute("SELECT * FROM pending_transactions")

    migrate.downgrade(database_url, "0007")
    assert migrate.current_revisions(database_url) == ("0007",)
    assert _reader_grants(db) == set()
    _refused(reader, "SELECT * FROM pending_transactions")
    # The role itself stays: it has a member (this test's login role), and
    # other databases of the server (the template) still grant to it.
    (member,) = db.execute(
        "SELECT pg_has_role(%s, %s, 'MEMBER')", (reader.info.user, READER)
    ).fetchone()
    assert member is True

    migrate.upgrade(database_url)
    assert migrate.current_revisions(database_url) == migrate.head_revisions()
    assert _reader_grants(db) == _expected_grants()
    for view in DOCUMENTED_VIEWS:
        reader.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(view)))
    _refused(reader, "SELECT body FROM messages")


@pytest.fixture
def own_server() -> Iterator[str]:
    """A PostgreSQL server of this test's own, its `postgres` database empty.

    Dropping the role can only be seen where no other database grants to
    it, which the shared server (template and test databases) never is.
    """
    with own_postgres("coordinator-test-reader-") as server:
        yield server.url()


def _reader_exists(url: str) -> bool:
    with psycopg.connect(url) as conn:
        (exists,) = conn.execute(
            "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s)", (READER,)
        ).fetchone()
    return exists


@pytest.mark.slow
def test_downgrading_the_only_database_drops_the_role_unless_it_has_members(
    own_server: str,
) -> None:
    migrate.upgrade(own_server)
    assert _reader_exists(own_server)
    migrate.downgrade(own_server, "0007")
    assert not _reader_exists(own_server)

    # A member is an operator's setup: the role and the membership stay.
    migrate.upgrade(own_server)
    with psycopg.connect(own_server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE operator_login LOGIN IN ROLE {}").format(sql.Identifier(READER))
        )
    migrate.downgrade(own_server, "0007")
    assert _reader_exists(own_server)
    migrate.upgrade(own_server)
    assert migrate.current_revisions(own_server) == migrate.head_revisions()
