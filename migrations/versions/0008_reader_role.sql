-- The SQL of migration 0008 (0008_reader_role.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/sql/schema/reader.sql.

-- name: upgrade
-- A role belongs to the whole cluster while grants belong to one database,
-- and one server holds many databases (and tests copy a migrated template):
-- create the role only if no other database's migration (or a DBA) already
-- did, which also spares a migrating user without CREATEROLE when the role
-- was made for it. A concurrent migration creating it at the same moment
-- fails the pg_authid unique index (unique_violation) rather than the
-- existence check (duplicate_object): both mean it is there. NOLOGIN: a
-- group role, which operators GRANT to their own login roles.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'coordinator_reader') THEN
        CREATE ROLE coordinator_reader NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;
-- A role that existed before may hold rights here that nobody reviewed:
-- start from nothing so that it can do exactly what is granted below.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM coordinator_reader;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM coordinator_reader;
REVOKE ALL ON SCHEMA public FROM coordinator_reader;
-- USAGE to resolve names in public, never CREATE. The views run with their
-- owner's rights, so no table is granted; archivable_messages is left out
-- because it is the archive's (it returns messages.*, bodies included).
GRANT USAGE ON SCHEMA public TO coordinator_reader;
GRANT SELECT ON pending_transactions, message_counts, message_timeline, check_backs, consumer_lag
    TO coordinator_reader;

-- name: downgrade
-- ALL, not just what upgrade granted: whatever was added here by hand
-- would keep the role from being dropped.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM coordinator_reader;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM coordinator_reader;
REVOKE ALL ON SCHEMA public FROM coordinator_reader;
-- Other databases of the server may still grant to the role (their own
-- migration made it their reader), an operator's login roles may be its
-- members, or the migrating user may not be allowed to drop it: in all of
-- those cases the role stays, so that downgrading one database of many
-- neither fails nor takes the role (and its memberships) from the others.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid
        WHERE r.rolname = 'coordinator_reader'
    ) THEN
        DROP ROLE IF EXISTS coordinator_reader;
    END IF;
EXCEPTION
    WHEN dependent_objects_still_exist OR insufficient_privilege THEN NULL;
END
$$;
