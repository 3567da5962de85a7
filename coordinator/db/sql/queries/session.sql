-- Statements about the connection itself, not about messages.

-- name: configure_session
-- Every execution is planned for the tables as they are now (coordinator/db/pool.py).
SET plan_cache_mode = force_custom_plan;

-- name: pin_read_committed
-- The compare-and-set statements (claims, ends, acks: UPDATE ... WHERE state
-- = ...) rely on READ COMMITTED: one that waited for a concurrent change of
-- its row re-reads the row and answers from what is there now. Under a
-- database default of REPEATABLE READ it would fail instead ("could not
-- serialize access due to concurrent update"). Transactions that need a
-- snapshot say so themselves (overview_snapshot).
SET default_transaction_isolation = 'read committed';

-- name: pin_synchronous_commit
-- The level the settings give (synchronous_commit, default on): with a
-- synchronous standby, a commit is acknowledged once the standby has it,
-- whatever the role's or the database's default. A function, since SET
-- takes no parameters.
SELECT FROM set_config('synchronous_commit', %(level)s::text, false);

-- name: confirm_durable
-- A transaction that writes WAL (a transactional logical-decoding message,
-- which no table keeps) and so, with synchronous_commit on, waits at its
-- commit until the synchronous standby has all WAL up to here: every earlier
-- commit included. An answer given from rows this session did not write (a
-- repeat) runs it first, since those rows may have been committed locally
-- only (a synchronous wait that was cancelled).
SELECT FROM pg_logical_emit_message(true, 'coordinator', '');

-- name: lock_migrations
-- returns: pg_advisory_xact_lock
-- Nodes started together on one database take turns to migrate: each waits
-- here, inside its migration transaction, before Alembic reads the current
-- revision, so the second finds the first's work done instead of creating the
-- same tables again. Released at that transaction's end.
SELECT pg_advisory_xact_lock(hashtextextended('coordinator migrations', 7));

-- name: listener_check
-- returns: in_recovery
-- The notifier's listening connection: is its server still there, and still
-- the primary (NOTIFY is sent on the primary only)?
SELECT pg_is_in_recovery() AS in_recovery;

-- name: data_complete_until
-- returns: complete_until
-- The moment up to which the server holds every commit: what a reader may
-- take as final (the overview's complete minutes, the report's closed
-- hours). A primary holds every commit: now(). A standby holds them up to
-- its replication lag (now() less the lag): none while it has applied all
-- the WAL it received and still receives; else up to the commit time of the
-- last transaction it applied (the primary's clock, as resolved_at and
-- born_at are). A standby no longer receiving (its primary gone) cannot know
-- what it misses, so it counts as behind. One that applied no transaction
-- since it started holds every commit before its last restartpoint.
SELECT CASE
           WHEN NOT pg_is_in_recovery() THEN now()
           WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()
                AND EXISTS (SELECT FROM pg_stat_wal_receiver) THEN now()
           ELSE coalesce(pg_last_xact_replay_timestamp(),
                         (SELECT checkpoint_time FROM pg_control_checkpoint()))
       END AS complete_until;

-- name: ping
-- returns: answers
-- /health: the database answers.
SELECT 1 AS answers;

-- name: database_exists
-- returns: found
-- The embedded server makes the coordinator's database on first start.
SELECT 1 AS found FROM pg_database WHERE datname = %(name)s::text;

-- name: create_database
-- {name} is filled in as an identifier (psycopg.sql), not as a parameter.
CREATE DATABASE {name};
