-- Where the coordinator's objects live: its own schema (the setting
-- database_schema), and Alembic's version table with them. `{schema}` is
-- that setting, a validated plain identifier (coordinator.db.installation
-- substitutes it; blocks without it run as they are).

-- name: create_schema
-- Looked up first: CREATE SCHEMA IF NOT EXISTS would still need CREATE on
-- the database, which a role given a schema its DBA made may not have.
DO $$
BEGIN
    IF to_regnamespace('{schema}') IS NULL THEN
        CREATE SCHEMA {schema};
    END IF;
END
$$;

-- name: version_tables
-- Which of the two schemas an Alembic version table is in, with its
-- revisions: an installation made before the coordinator had a schema of
-- its own keeps it in public (beside, perhaps, an application's own).
SELECT n.nspname AS schema_name
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'alembic_version' AND c.relkind = 'r' AND n.nspname IN ('{schema}', 'public');

-- name: public_revisions
SELECT version_num FROM public.alembic_version;

-- name: version_table_to_schema
ALTER TABLE public.alembic_version SET SCHEMA {schema};

-- name: version_table_to_public
ALTER TABLE {schema}.alembic_version SET SCHEMA public;

-- name: name_schema
-- For the migration that moves an installation into its schema (0017): the
-- schema it moves to, whatever the search_path. Until the transaction ends.
SELECT set_config('coordinator.database_schema', '{schema}', true);

-- name: search_public
-- While an installation made in public is migrated up to the move: the
-- older migrations run as they always did, on public's objects.
SELECT set_config('search_path', 'public', true);

-- name: installed_in_schema
-- Whether the coordinator's tables are in the schema (a database migrated
-- into it from the start is, at every revision).
SELECT to_regclass('{schema}.messages') IS NOT NULL;

-- name: drop_schema_if_empty
-- After a downgrade below the move: the schema goes if nothing is left in it
-- (a schema someone put other things in stays).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_class WHERE relnamespace = '{schema}'::regnamespace)
       AND NOT EXISTS (SELECT FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace)
       AND NOT EXISTS (SELECT FROM pg_type WHERE typnamespace = '{schema}'::regnamespace)
    THEN
        DROP SCHEMA {schema};
    END IF;
END
$$;
