-- The barrier's check, run by the coordinator in a producer group's own
-- database (its check source), on the group's barrier table ({table}: an
-- identifier, filled in by coordinator/db/producer_barrier.py). The same
-- rule as the SDK's Barrier.check: a `rolled_back` marker unless a row is
-- there (waiting on the key while a local transaction holding it runs),
-- then read which outcome won; committed by the caller.

-- name: barrier_insert_marker
INSERT INTO {table} (transaction_id, outcome)
VALUES (%(transaction_id)s::text, 'rolled_back')
ON CONFLICT (transaction_id) DO NOTHING;

-- name: barrier_read_outcome
-- returns: outcome
SELECT outcome FROM {table} WHERE transaction_id = %(transaction_id)s::text;
