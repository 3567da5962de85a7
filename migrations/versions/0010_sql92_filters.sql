-- The SQL of migration 0010 (0010_sql92_filters.py runs these blocks, after
-- it adds subscriptions.filter_type and subscriptions.filter). Frozen like
-- the migration itself: the current definitions are in
-- coordinator/db/sql/schema/.

-- name: upgrade
-- A SQL92 filter's number: the value when the text is a decimal number
-- (an optional sign, digits with an optional fraction and exponent), else
-- NULL. Bounded so that the cast can never fail: a filter must not make a
-- commit fail.
CREATE FUNCTION sql92_number(value text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN length(value) <= 1000
     AND value ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
    THEN value::numeric
END
$$;

-- A value of a SQL92 filter tree (coordinator/domain/sql92.py) as text:
-- a property's value (NULL when the message has none; TAGS is the
-- message's tag), or a literal's text ('true'/'false' for booleans).
CREATE FUNCTION sql92_text(value jsonb, tags text, properties jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN value ? 'property' THEN
        CASE WHEN value ->> 'property' = 'TAGS' THEN tags
             ELSE properties ->> (value ->> 'property') END
    WHEN value ? 'string' THEN value ->> 'string'
    WHEN value ? 'number' THEN value ->> 'number'
    WHEN value ? 'boolean' THEN value ->> 'boolean'
END
$$;

-- 'string' (properties are text), 'number' or 'boolean': how a value compares.
CREATE FUNCTION sql92_kind(value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN value ? 'number' THEN 'number'
    WHEN value ? 'boolean' THEN 'boolean'
    ELSE 'string'
END
$$;

-- A condition of a SQL92 filter tree against one message, in SQL's
-- three-valued logic as RocketMQ evaluates it: a comparison with a missing
-- property (or, for numbers, a value that is not a number) is unknown
-- (NULL), and NOT, AND and OR carry unknown along. `=`/`<>` compare
-- strings as text, numbers (and a string with a number) as numbers, and a
-- string with TRUE/FALSE as 'true' (any case) or not; `<`, `>`, BETWEEN
-- compare numbers only. CONTAINS, STARTSWITH and ENDSWITH (and their NOT
-- forms) are false for a missing property or an empty search, as in
-- RocketMQ. Never raises: an unknown node is unknown.
CREATE FUNCTION sql92_eval(node jsonb, tags text, properties jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    op text := node ->> 'op';
    arg jsonb;
    result boolean;
    left_text text;
    right_text text;
    left_kind text;
    right_kind text;
    search text;
    value_number numeric;
BEGIN
    IF op IN ('and', 'or') THEN
        result := op = 'and';
        FOR arg IN SELECT a FROM jsonb_array_elements(node -> 'args') AS a LOOP
            IF op = 'and' THEN
                result := result AND sql92_eval(arg, tags, properties);
            ELSE
                result := result OR sql92_eval(arg, tags, properties);
            END IF;
            -- Decided: false ends an AND, true ends an OR.
            IF result IS NOT NULL AND result <> (op = 'and') THEN
                RETURN result;
            END IF;
        END LOOP;
        RETURN result;
    ELSIF op = 'not' THEN
        RETURN NOT sql92_eval(node -> 'arg', tags, properties);
    ELSIF op = 'literal' THEN
        RETURN (node ->> 'value')::boolean;
    ELSIF op IN ('=', '<>') THEN
        left_text := sql92_text(node -> 'left', tags, properties);
        right_text := sql92_text(node -> 'right', tags, properties);
        IF left_text IS NULL OR right_text IS NULL THEN
            RETURN NULL;
        END IF;
        left_kind := sql92_kind(node -> 'left');
        right_kind := sql92_kind(node -> 'right');
        IF left_kind = right_kind AND left_kind <> 'number' THEN
            result := left_text = right_text;
        ELSIF left_kind = 'boolean' AND right_kind = 'string' THEN
            result := (lower(right_text) = 'true') = left_text::boolean;
        ELSIF left_kind = 'string' AND right_kind = 'boolean' THEN
            result := (lower(left_text) = 'true') = right_text::boolean;
        ELSIF left_kind = 'boolean' OR right_kind = 'boolean' THEN
            result := false;
        ELSE
            result := sql92_number(left_text) = sql92_number(right_text);
        END IF;
        RETURN CASE WHEN op = '=' THEN result ELSE NOT result END;
    ELSIF op IN ('<', '<=', '>', '>=') THEN
        value_number := sql92_number(sql92_text(node -> 'left', tags, properties));
        RETURN CASE op
            WHEN '<' THEN value_number < sql92_number(sql92_text(node -> 'right', tags, properties))
            WHEN '<=' THEN value_number <= sql92_number(sql92_text(node -> 'right', tags, properties))
            WHEN '>' THEN value_number > sql92_number(sql92_text(node -> 'right', tags, properties))
            ELSE value_number >= sql92_number(sql92_text(node -> 'right', tags, properties))
        END;
    ELSIF op = 'between' THEN
        value_number := sql92_number(sql92_text(node -> 'value', tags, properties));
        result := value_number >= sql92_number(sql92_text(node -> 'low', tags, properties))
              AND value_number <= sql92_number(sql92_text(node -> 'high', tags, properties));
    ELSIF op = 'in' THEN
        left_text := sql92_text(node -> 'value', tags, properties);
        IF left_text IS NULL THEN
            RETURN NULL;
        END IF;
        result := EXISTS (
            SELECT 1 FROM jsonb_array_elements_text(node -> 'values') AS v WHERE v = left_text
        );
    ELSIF op = 'is_null' THEN
        result := sql92_text(node -> 'value', tags, properties) IS NULL;
    ELSIF op IN ('contains', 'startswith', 'endswith') THEN
        left_text := sql92_text(node -> 'value', tags, properties);
        search := node ->> 'search';
        IF left_text IS NULL OR search IS NULL OR search = ''
           OR sql92_kind(node -> 'value') <> 'string' THEN
            RETURN false;
        END IF;
        result := CASE op
            WHEN 'contains' THEN strpos(left_text, search) > 0
            WHEN 'startswith' THEN starts_with(left_text, search)
            ELSE right(left_text, length(search)) = search
        END;
    ELSE
        RETURN NULL;
    END IF;
    RETURN CASE WHEN (node ->> 'negated')::boolean THEN NOT result ELSE result END;
END
$$;

-- Whether a message passes a subscription's SQL92 filter: only a condition
-- that is true delivers (false and unknown do not).
CREATE FUNCTION sql92_matches(filter jsonb, tags text, properties jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT coalesce(sql92_eval(filter, tags, properties), false)
$$;

-- The fan-out evaluates SQL92 filters.
CREATE OR REPLACE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    ids bigint[];          -- newly committed messages, in offset order
    topics text[];
    tag_values text[];
    message_groups text[];
    closed bigint[];       -- messages that left 'prepared'
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id ORDER BY n.id), array_agg(n.topic ORDER BY n.id),
               array_agg(n.tags ORDER BY n.id), array_agg(n.message_group ORDER BY n.id)
        INTO ids, topics, tag_values, message_groups
        FROM new_messages n
        WHERE n.state = 'committed';
    ELSE
        -- Only a change *to* 'committed' delivers: re-running for an already
        -- committed row (any other UPDATE, e.g. check counts) adds nothing.
        SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.topic ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.tags ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.message_group ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.id) FILTER (WHERE c.closes)
        INTO ids, topics, tag_values, message_groups, closed
        FROM (
            SELECT n.id, n.topic, n.tags, n.message_group,
                   n.state = 'committed' AND o.state <> 'committed' AS delivers,
                   o.state = 'prepared' AND n.state <> 'prepared' AS closes
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
        ) AS c;
        -- A resolved message needs no more check-backs.
        IF closed IS NOT NULL THEN
            DELETE FROM check_requests WHERE message_offset = ANY (closed);
        END IF;
    END IF;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock. (The IF
    -- is a plain expression, no query: most commits have no message group.)
    IF cardinality(array_remove(message_groups, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(keys.k)
        FROM (
            SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
            FROM unnest(topics, message_groups) AS m (topic, message_group)
            WHERE m.message_group IS NOT NULL
              AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
            ORDER BY k
        ) AS keys;
    END IF;
    -- ORDER BY m.id gives a batch's deliveries ids in offset order. A tag
    -- filter is a plain comparison; only a SQL92 filter (subscriptions.filter)
    -- reads the message's properties, by its primary key, so commits to
    -- topics without one do no more work than before.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags, s.filter
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM unnest(ids, topics, tag_values, message_groups) AS m (id, topic, tags, message_group)
        JOIN subscribed s ON s.topic = m.topic
        WHERE CASE
            WHEN s.filter IS NULL THEN s.tags IS NULL OR m.tags = ANY (s.tags)
            ELSE sql92_matches(
                s.filter, m.tags, (SELECT p.properties FROM messages p WHERE p.id = m.id)
            )
        END
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    IF notified IS NOT NULL THEN
        PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    END IF;
    RETURN NULL;
END
$$;

-- name: downgrade
-- An older coordinator cannot filter by SQL92: its fan-out would deliver
-- every message of the topic to these groups. They go, with their
-- pending deliveries (trigger subscriptions_deleted).
DELETE FROM subscriptions WHERE filter_type = 'sql92';
CREATE OR REPLACE FUNCTION messages_changed() RETURNS trigger
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    ids bigint[];          -- newly committed messages, in offset order
    topics text[];
    tag_values text[];
    message_groups text[];
    closed bigint[];       -- messages that left 'prepared'
    notified text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(n.id ORDER BY n.id), array_agg(n.topic ORDER BY n.id),
               array_agg(n.tags ORDER BY n.id), array_agg(n.message_group ORDER BY n.id)
        INTO ids, topics, tag_values, message_groups
        FROM new_messages n
        WHERE n.state = 'committed';
    ELSE
        -- Only a change *to* 'committed' delivers: re-running for an already
        -- committed row (any other UPDATE, e.g. check counts) adds nothing.
        SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.topic ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.tags ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.message_group ORDER BY c.id) FILTER (WHERE c.delivers),
               array_agg(c.id) FILTER (WHERE c.closes)
        INTO ids, topics, tag_values, message_groups, closed
        FROM (
            SELECT n.id, n.topic, n.tags, n.message_group,
                   n.state = 'committed' AND o.state <> 'committed' AS delivers,
                   o.state = 'prepared' AND n.state <> 'prepared' AS closes
            FROM new_messages n
            JOIN old_messages o ON o.id = n.id
        ) AS c;
        -- A resolved message needs no more check-backs.
        IF closed IS NOT NULL THEN
            DELETE FROM check_requests WHERE message_offset = ANY (closed);
        END IF;
    END IF;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- FIFO: commits of one message group take turns from here until they
    -- commit, so delivery ids within a message group follow commit order and
    -- a lower id can never become visible after a higher one was handed out.
    -- Locks are taken in key order so that batches cannot deadlock. (The IF
    -- is a plain expression, no query: most commits have no message group.)
    IF cardinality(array_remove(message_groups, NULL)) > 0 THEN
        PERFORM pg_advisory_xact_lock(keys.k)
        FROM (
            SELECT DISTINCT hashtextextended(m.topic || ' ' || m.message_group, 4004) AS k
            FROM unnest(topics, message_groups) AS m (topic, message_group)
            WHERE m.message_group IS NOT NULL
              AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.topic = m.topic AND s.fifo)
            ORDER BY k
        ) AS keys;
    END IF;
    -- ORDER BY m.id gives a batch's deliveries ids in offset order.
    WITH subscribed AS (
        SELECT s.consumer_group, s.topic, s.tags
        FROM subscriptions s
        WHERE s.topic = ANY (topics)
        FOR KEY SHARE
    ),
    fanned AS (
        INSERT INTO deliveries (message_offset, consumer_group, topic, message_group)
        SELECT m.id, s.consumer_group, m.topic, m.message_group
        FROM unnest(ids, topics, tag_values, message_groups) AS m (id, topic, tags, message_group)
        JOIN subscribed s ON s.topic = m.topic
        WHERE s.tags IS NULL OR m.tags = ANY (s.tags)
        ORDER BY m.id, s.consumer_group
        ON CONFLICT (message_offset, consumer_group) DO NOTHING
        RETURNING consumer_group
    )
    SELECT array_agg(DISTINCT consumer_group) INTO notified FROM fanned;
    -- Delivered to waiting receivers only once this transaction commits.
    IF notified IS NOT NULL THEN
        PERFORM pg_notify('coordinator_deliveries', g) FROM unnest(notified) AS g;
    END IF;
    RETURN NULL;
END
$$;
DROP FUNCTION sql92_matches(jsonb, text, jsonb);
DROP FUNCTION sql92_eval(jsonb, text, jsonb);
DROP FUNCTION sql92_kind(jsonb);
DROP FUNCTION sql92_text(jsonb, text, jsonb);
DROP FUNCTION sql92_number(text);
