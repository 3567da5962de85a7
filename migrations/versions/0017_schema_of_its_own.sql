-- The SQL of migration 0017 (0017_schema_of_its_own.py runs these blocks).
-- Frozen like the migration itself: the objects are those of revision 0016.

-- name: upgrade
DO $$
DECLARE
    home text := current_setting('coordinator.database_schema');
    tables text[] := ARRAY['messages', 'message_history', 'subscriptions', 'deliveries',
                           'dead_letters', 'producers', 'check_requests', 'check_sources',
                           'api_tokens'];
    views text[] := ARRAY['pending_transactions', 'message_counts', 'message_timeline',
                          'check_backs', 'consumer_lag', 'archivable_messages'];
    functions text[] := ARRAY['messages_changed()', 'messages_deleted()',
                              'subscriptions_deleted()', 'sql92_number(text)',
                              'sql92_text(jsonb, text, jsonb)', 'sql92_kind(jsonb)',
                              'sql92_eval(jsonb, text, jsonb)',
                              'sql92_matches(jsonb, text, jsonb)'];
    item text;
BEGIN
    FOREACH item IN ARRAY tables LOOP
        IF to_regclass(format('%I.%I', home, item)) IS NULL THEN
            EXECUTE format('ALTER TABLE public.%I SET SCHEMA %I', item, home);
        END IF;
    END LOOP;
    FOREACH item IN ARRAY views LOOP
        IF to_regclass(format('%I.%I', home, item)) IS NULL THEN
            EXECUTE format('ALTER VIEW public.%I SET SCHEMA %I', item, home);
        END IF;
    END LOOP;
    FOREACH item IN ARRAY functions LOOP
        IF to_regprocedure(format('%I.%s', home, item)) IS NULL THEN
            EXECUTE format('ALTER FUNCTION public.%s SET SCHEMA %I', item, home);
        END IF;
    END LOOP;
    -- From here on (the functions' search_path, later migrations): the schema only.
    PERFORM set_config('search_path', quote_ident(home), true);
    -- The entry points only: the SQL92 helpers below sql92_matches run inside
    -- it, and a SET clause on each of them would cost every call of the
    -- recursive evaluation a save and restore of the setting (2.3 times slower).
    FOREACH item IN ARRAY ARRAY['messages_changed()', 'messages_deleted()',
                                'subscriptions_deleted()',
                                'sql92_matches(jsonb, text, jsonb)'] LOOP
        EXECUTE format('ALTER FUNCTION %I.%s SET search_path FROM CURRENT', home, item);
    END LOOP;
    EXECUTE format('REVOKE ALL ON SCHEMA %I FROM coordinator_reader', home);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO coordinator_reader', home);
    REVOKE ALL ON SCHEMA public FROM coordinator_reader;
END
$$;

-- name: downgrade
DO $$
DECLARE
    home text := current_setting('coordinator.database_schema');
    tables text[] := ARRAY['messages', 'message_history', 'subscriptions', 'deliveries',
                           'dead_letters', 'producers', 'check_requests', 'check_sources',
                           'api_tokens'];
    views text[] := ARRAY['pending_transactions', 'message_counts', 'message_timeline',
                          'check_backs', 'consumer_lag', 'archivable_messages'];
    functions text[] := ARRAY['messages_changed()', 'messages_deleted()',
                              'subscriptions_deleted()', 'sql92_number(text)',
                              'sql92_text(jsonb, text, jsonb)', 'sql92_kind(jsonb)',
                              'sql92_eval(jsonb, text, jsonb)',
                              'sql92_matches(jsonb, text, jsonb)'];
    item text;
BEGIN
    FOREACH item IN ARRAY tables || views LOOP
        IF to_regclass(format('public.%I', item)) IS NOT NULL THEN
            RAISE EXCEPTION 'cannot move the coordinator back into public: public already has %', item;
        END IF;
    END LOOP;
    FOREACH item IN ARRAY functions LOOP
        EXECUTE format('ALTER FUNCTION %I.%s RESET search_path', home, item);
        EXECUTE format('ALTER FUNCTION %I.%s SET SCHEMA public', home, item);
    END LOOP;
    FOREACH item IN ARRAY tables LOOP
        EXECUTE format('ALTER TABLE %I.%I SET SCHEMA public', home, item);
    END LOOP;
    FOREACH item IN ARRAY views LOOP
        EXECUTE format('ALTER VIEW %I.%I SET SCHEMA public', home, item);
    END LOOP;
    EXECUTE format('REVOKE ALL ON SCHEMA %I FROM coordinator_reader', home);
    GRANT USAGE ON SCHEMA public TO coordinator_reader;
    -- The older migrations' downgrades run on public, as they were written.
    PERFORM set_config('search_path', 'public', true);
END
$$;
