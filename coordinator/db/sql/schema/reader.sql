-- The read-only group role coordinator_reader and what it may read: the
-- documented views, nothing else (operators GRANT it to their login roles).
-- coordinator.db.schema_objects runs these blocks after the views (the
-- role, then the grants), as migration 0008 does.

-- name: reader_role
-- Roles are cluster-wide and grants per database: the role may already
-- exist for another database of the server, so create it only if missing
-- (a concurrent creation fails the unique index of pg_authid rather than
-- the check). NOLOGIN: a group role.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'coordinator_reader') THEN
        CREATE ROLE coordinator_reader NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

-- name: reader_revoke_tables
-- A role that existed before may hold rights here that nobody reviewed:
-- start from nothing so that it can do exactly what is granted below. Here
-- is the coordinator's schema (the setting database_schema), the first of
-- the search_path every connection of the coordinator sets: named by
-- current_schema(), hence the DO blocks.
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM coordinator_reader',
                   current_schema());
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM coordinator_reader',
                   current_schema());
    EXECUTE format('REVOKE ALL ON SCHEMA %I FROM coordinator_reader', current_schema());
    -- USAGE to resolve names in the schema, never CREATE.
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO coordinator_reader', current_schema());
END
$$;

-- name: reader_views
-- The views of docs/sql.md that people query. They run with their owner's
-- rights, so no table is granted. archivable_messages is left out: it is
-- the archive's definition of what it may take and returns messages.*,
-- bodies included.
GRANT SELECT ON pending_transactions, message_counts, message_timeline, check_backs, consumer_lag
    TO coordinator_reader;
