-- The SQL of migration 0015 (0015_check_sources.py runs these blocks).
-- Frozen like the migration itself: the current definitions are in
-- coordinator/db/schema.py.

-- name: upgrade
CREATE TABLE check_sources (
    producer_group text NOT NULL,
    database_url text NOT NULL,
    password_encrypted text,
    barrier_table text NOT NULL,
    mode text NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    updated_at timestamptz DEFAULT now() NOT NULL,
    last_check_at timestamptz,
    last_ok boolean,
    last_error text,
    consecutive_failures integer DEFAULT 0 NOT NULL,
    CONSTRAINT pk_check_sources PRIMARY KEY (producer_group),
    CONSTRAINT ck_check_sources_mode CHECK (mode IN ('fallback', 'only'))
);
ALTER TABLE check_requests DROP CONSTRAINT ck_check_requests_via;
ALTER TABLE check_requests ADD CONSTRAINT ck_check_requests_via
    CHECK (via IS NULL OR via IN ('pull', 'push', 'database'));
ALTER TABLE check_requests DROP CONSTRAINT ck_check_requests_addressed;
ALTER TABLE check_requests ADD CONSTRAINT ck_check_requests_addressed
    CHECK ((status = 'no_producer') = (via IS NULL)
           AND (instance_id IS NULL) = (via IS NULL OR via = 'database'));

-- name: downgrade
-- Database check requests become plain waiting ones: the next round asks a
-- live instance, or waits for one.
UPDATE check_requests
SET status = 'no_producer', via = NULL, detail = NULL
WHERE via = 'database';
ALTER TABLE check_requests DROP CONSTRAINT ck_check_requests_addressed;
ALTER TABLE check_requests ADD CONSTRAINT ck_check_requests_addressed
    CHECK ((status = 'no_producer') = (instance_id IS NULL) AND (instance_id IS NULL) = (via IS NULL));
ALTER TABLE check_requests DROP CONSTRAINT ck_check_requests_via;
ALTER TABLE check_requests ADD CONSTRAINT ck_check_requests_via
    CHECK (via IS NULL OR via IN ('pull', 'push'));
DROP TABLE check_sources;
