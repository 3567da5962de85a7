-- The lifecycle report's figures as SQL (bench/report_figures.py): the
-- benchmark's yardstick and the pipeline tests' reference.

-- name: pipeline_report_reference
-- returns: producer_group, topic, hour, messages, prepared, committed, rolled_back, discarded,
-- returns: expired, latency_s, checked, check_count_mean, check_count_max, discard_rate,
-- returns: expiry_rate, pending_age_p50_s, pending_age_max_s
-- The report's figures per producer group, topic and hour as one SQL
-- aggregate: the benchmark's yardstick and the tests' reference.
SELECT producer_group, topic, date_trunc('hour', born_at AT TIME ZONE 'UTC') AS hour,
       count(*) AS messages,
       count(*) FILTER (WHERE state = 'prepared') AS prepared,
       count(*) FILTER (WHERE state = 'committed') AS committed,
       count(*) FILTER (WHERE state = 'rolled_back') AS rolled_back,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'expired') AS expired,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM resolved_at - born_at)::float8
       ) FILTER (WHERE state IN ('committed', 'rolled_back')) AS latency_s,
       count(*) FILTER (WHERE check_count > 0) AS checked,
       avg(check_count)::float8 AS check_count_mean,
       max(check_count) AS check_count_max,
       (count(*) FILTER (WHERE state = 'discarded'))::float8 / count(*) AS discard_rate,
       (count(*) FILTER (WHERE state = 'expired'))::float8 / count(*) AS expiry_rate,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8
       ) FILTER (WHERE state = 'prepared') AS pending_age_p50_s,
       max(extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8)
           FILTER (WHERE state = 'prepared') AS pending_age_max_s
FROM messages
WHERE kind = 'transactional'
GROUP BY 1, 2, 3;

-- name: pipeline_report_reference_totals
-- returns: producer_group, topic, messages, prepared, committed, rolled_back, discarded, expired,
-- returns: latency_s, checked, check_count_mean, check_count_max, discard_rate, expiry_rate,
-- returns: pending_age_p50_s, pending_age_max_s
-- The report's figures per producer group and topic (figures_total) as SQL.
SELECT producer_group, topic,
       count(*) AS messages,
       count(*) FILTER (WHERE state = 'prepared') AS prepared,
       count(*) FILTER (WHERE state = 'committed') AS committed,
       count(*) FILTER (WHERE state = 'rolled_back') AS rolled_back,
       count(*) FILTER (WHERE state = 'discarded') AS discarded,
       count(*) FILTER (WHERE state = 'expired') AS expired,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM resolved_at - born_at)::float8
       ) FILTER (WHERE state IN ('committed', 'rolled_back')) AS latency_s,
       count(*) FILTER (WHERE check_count > 0) AS checked,
       avg(check_count)::float8 AS check_count_mean,
       max(check_count) AS check_count_max,
       (count(*) FILTER (WHERE state = 'discarded'))::float8 / count(*) AS discard_rate,
       (count(*) FILTER (WHERE state = 'expired'))::float8 / count(*) AS expiry_rate,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8
       ) FILTER (WHERE state = 'prepared') AS pending_age_p50_s,
       max(extract(epoch FROM %(as_of)s::timestamptz - born_at)::float8)
           FILTER (WHERE state = 'prepared') AS pending_age_max_s
FROM messages
WHERE kind = 'transactional'
GROUP BY 1, 2;

-- name: pipeline_report_reference_checks
-- returns: producer_group, topic, hour, check_count, messages
-- The report's check-back count distribution as SQL.
SELECT producer_group, topic, date_trunc('hour', born_at AT TIME ZONE 'UTC') AS hour,
       check_count, count(*) AS messages
FROM messages
WHERE kind = 'transactional'
GROUP BY 1, 2, 3, 4;
