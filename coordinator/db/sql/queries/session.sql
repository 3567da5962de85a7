-- Statements about the connection itself, not about messages.

-- name: configure_session
-- Every execution is planned for the tables as they are now (coordinator/db/pool.py).
SET plan_cache_mode = force_custom_plan;

-- name: ping
-- /health: the database answers.
SELECT 1;
