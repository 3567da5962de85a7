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

-- name: ping
-- /health: the database answers.
SELECT 1;

-- name: database_exists
-- The embedded server makes the coordinator's database on first start.
SELECT 1 FROM pg_database WHERE datname = %(name)s::text;

-- name: create_database
-- {name} is filled in as an identifier (psycopg.sql), not as a parameter.
CREATE DATABASE {name};
