-- Delivery: storage of deliveries, the trigger that removes a deleted
-- subscription's deliveries, and the view consumer_lag. The fan-out of
-- committed messages to deliveries is messages_changed (messages.sql).

-- name: deliveries_storage
-- A queue table: every row is inserted, updated at least once and deleted.
-- Room for HOT updates (no updated column is indexed), and vacuum after a
-- small, fixed number of dead rows instead of 20% of a table that is
-- mostly dead rows, unthrottled because the table stays small.
ALTER TABLE deliveries SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);

-- name: subscriptions_deleted
-- ON DELETE CASCADE from subscriptions to deliveries, once per statement.
-- The fan-out key-share locks the subscriptions it reads, so an unsubscribe
-- waits for a commit that is fanning out to it and then removes what it
-- fanned out.
CREATE FUNCTION subscriptions_deleted() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM deliveries d
    USING old_subscriptions s
    WHERE d.consumer_group = s.consumer_group AND d.topic = s.topic;
    RETURN NULL;
END
$$;

-- name: subscriptions_deleted_trigger
CREATE TRIGGER subscriptions_deleted AFTER DELETE ON subscriptions
REFERENCING OLD TABLE AS old_subscriptions
FOR EACH STATEMENT EXECUTE FUNCTION subscriptions_deleted();

-- name: consumer_lag
CREATE VIEW consumer_lag AS
WITH pending AS (
    SELECT consumer_group, topic,
           count(*) AS lag,
           count(*) FILTER (WHERE receipt_handle IS NOT NULL AND visible_at > now()) AS in_flight,
           min(committed_at) AS oldest_pending_at
    FROM deliveries
    GROUP BY consumer_group, topic
),
dead AS (
    SELECT consumer_group, topic, count(*) AS dead_letters
    FROM dead_letters
    GROUP BY consumer_group, topic
),
pairs AS (
    SELECT consumer_group, topic FROM subscriptions
    UNION
    SELECT consumer_group, topic FROM dead
)
SELECT pairs.consumer_group, pairs.topic,
       coalesce(pending.lag, 0) AS lag,
       coalesce(pending.in_flight, 0) AS in_flight,
       coalesce(dead.dead_letters, 0) AS dead_letters,
       pending.oldest_pending_at
FROM pairs
LEFT JOIN pending USING (consumer_group, topic)
LEFT JOIN dead USING (consumer_group, topic);

-- name: sql92_number
-- (The SQL92 helpers below sql92_matches carry no search_path of their own:
-- they run inside sql92_matches, which sets it; a SET clause on each would
-- cost every step of the recursive evaluation a save and restore of the
-- setting, 2.3 times slower, and keep the SQL ones from being inlined.)
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

-- name: sql92_text
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

-- name: sql92_kind
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

-- name: sql92_eval
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

-- name: sql92_matches
-- Whether a message passes a subscription's SQL92 filter: only a condition
-- that is true delivers (false and unknown do not).
CREATE FUNCTION sql92_matches(filter jsonb, tags text, properties jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
SELECT coalesce(sql92_eval(filter, tags, properties), false)
$$;
