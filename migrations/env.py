"""Alembic environment. The target metadata is coordinator.db.schema."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from coordinator.db.queries import query
from coordinator.db.schema import metadata
from coordinator.db.urls import sqlalchemy_url

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


def run_migrations_offline() -> None:
    context.configure(
        url=sqlalchemy_url(_database_url()),
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(sqlalchemy_url(_database_url()), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            # Before Alembic reads the version table: see lock_migrations.
            connection.exec_driver_sql(query("lock_migrations"))
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
