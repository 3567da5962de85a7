-- API tokens: created, listed and revoked by `coordinator tokens`, read by
-- every serving process. A change notifies `coordinator_tokens`, so servers
-- reread the tokens at once (and every token_refresh_seconds regardless).

-- name: create_token
-- returns: id, name, secret_sha256, produce_topics, producer_groups, consume_groups,
-- returns: consume_topics, admin, metrics, created_at, revoked_at
WITH created AS (
    INSERT INTO api_tokens (
        name, secret_sha256, produce_topics, producer_groups, consume_groups,
        consume_topics, admin, metrics
    )
    VALUES (
        %(name)s::text, %(secret_sha256)s::text, %(produce_topics)s::text[],
        %(producer_groups)s::text[], %(consume_groups)s::text[], %(consume_topics)s::text[],
        %(admin)s::boolean, %(metrics)s::boolean
    )
    ON CONFLICT (name) DO NOTHING
    RETURNING *
),
notified AS (
    SELECT pg_notify('coordinator_tokens', name) FROM created
)
SELECT created.* FROM created LEFT JOIN notified ON true;

-- name: list_tokens
-- returns: id, name, produce_topics, producer_groups, consume_groups, consume_topics, admin,
-- returns: metrics, created_at, revoked_at
-- Every token, revoked ones too (they stay listed with revoked_at).
SELECT id, name, produce_topics, producer_groups, consume_groups, consume_topics,
       admin, metrics, created_at, revoked_at
FROM api_tokens
ORDER BY name;

-- name: revoke_token
-- returns: id, name, secret_sha256, produce_topics, producer_groups, consume_groups,
-- returns: consume_topics, admin, metrics, created_at, revoked_at
WITH revoked AS (
    UPDATE api_tokens SET revoked_at = now()
    WHERE name = %(name)s::text AND revoked_at IS NULL
    RETURNING *
),
notified AS (
    SELECT pg_notify('coordinator_tokens', name) FROM revoked
)
SELECT revoked.* FROM revoked LEFT JOIN notified ON true;

-- name: active_tokens
-- returns: name, secret_sha256, produce_topics, producer_groups, consume_groups, consume_topics,
-- returns: admin, metrics
-- What a serving process authenticates against (kept in memory).
SELECT name, secret_sha256, produce_topics, producer_groups, consume_groups,
       consume_topics, admin, metrics
FROM api_tokens
WHERE revoked_at IS NULL;

-- name: count_active_tokens
-- returns: tokens
-- `coordinator serve` decides at start whether it may listen beyond loopback.
SELECT count(*) AS tokens FROM api_tokens WHERE revoked_at IS NULL;
