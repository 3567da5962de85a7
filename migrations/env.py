"""Alembic environment. The target metadata is coordinator.db.schema.

Everything, the version table included, lives in the schema of the setting
database_schema, created here if missing. An installation made before the
coordinator had a schema of its own has its version table in public: it is
moved into the schema before the migrations run, which run on public until
revision MOVE_REVISION moves the rest; it is moved back when a downgrade
leaves the database below that revision, where every object is in public
again.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from coordinator.db.installation import MOVE_REVISION, installation_sql
from coordinator.db.migrate import version_table_schema, version_tables
from coordinator.db.queries import query
from coordinator.db.schema import metadata
from coordinator.db.urls import in_schema, sqlalchemy_url

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    url = config.attributes.get("database_url")
    if url:
        return url
    # Run as plain `alembic ...`: resolve the database like `coordinator serve`.
    from coordinator.config import Settings
    from coordinator.db.ready import database_url_for

    return database_url_for(Settings())


def _database_schema() -> str:
    schema = config.attributes.get("database_schema")
    if schema:
        return schema
    from coordinator.config import Settings

    return Settings().database_schema


def _moved(heads: tuple[str, ...]) -> bool:
    """Whether a database at `heads` has had MOVE_REVISION applied."""
    script = context.script
    return any(
        revision.revision == MOVE_REVISION
        for head in heads
        for revision in script.iterate_revisions(head, "base")
    )


def run_migrations_offline() -> None:
    schema = _database_schema()
    context.configure(
        url=sqlalchemy_url(in_schema(_database_url(), schema)),
        target_metadata=metadata,
        literal_binds=True,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    schema = _database_schema()
    url = sqlalchemy_url(in_schema(_database_url(), schema))
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection, target_metadata=metadata, version_table_schema=schema
        )
        with context.begin_transaction():
            # Before Alembic reads the version table: see lock_migrations.
            connection.exec_driver_sql(query("lock_migrations"))
            connection.exec_driver_sql(installation_sql("create_schema", schema))
            connection.exec_driver_sql(installation_sql("name_schema", schema))
            if version_table_schema(connection, schema) == "public":
                connection.exec_driver_sql(installation_sql("version_table_to_schema", schema))
                connection.exec_driver_sql(installation_sql("search_public", schema))
            context.run_migrations()
            if not _moved(context.get_context().get_current_heads()):
                _back_to_public(connection, schema)
    engine.dispose()


def _back_to_public(connection: Connection, schema: str) -> None:
    """Below MOVE_REVISION the version table is where the tables are.

    In public after a downgrade below the move, or at base (unless public
    has one already, an application's: ours then stays); in the schema for
    a database migrated into it from the start and stopped short of head.
    """
    installed = connection.exec_driver_sql(installation_sql("installed_in_schema", schema))
    if installed.scalar():
        return
    if version_tables(connection, schema) == {schema}:
        connection.exec_driver_sql(installation_sql("version_table_to_public", schema))
    connection.exec_driver_sql(installation_sql("drop_schema_if_empty", schema))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
