-- name: request_scopes
-- inputs: requests, cache_rules
-- output: one row per request whose cache scope other requests decide, with that part of it.
--   Helper for prefix_requests (its header says why each holds). Two kinds of request:
--   - a refused request (an HTTP error status, or no response) takes the model that served
--     a processed request of the same name, in the same account and provider: the latest
--     earlier answer, else the next one (served_model);
--   - a request without an account belongs to a run of its source file and session id that
--     no gap longer than the longest lifetime of any cache rule interrupts (run_scope).
--   Every other column of prefix_requests depends on the request itself, or (the arrival
--   order) on the requests of its own UTC day. So this is the one part of request_prefix that
--   looks across the whole history, and it is small: `cacheaudit build` computes it over every
--   request and the rest for the days it computes again (pipeline/prefix_days.py).
WITH longest AS (
    -- the longest any rule keeps an entry (a day if no rule publishes one)
    SELECT coalesce(max(greatest(coalesce(lifetime_s, 0), coalesce(extended_lifetime_s, 0))),
                    86400) * 1000000                                    AS longest_us
    FROM cache_rules
),

-- requests without an account, in runs: a gap over the longest lifetime starts a new one
unscoped AS (
    SELECT
        request_id, source, source_index, session_id, provider, started_at,
        epoch_us(started_at) - lag(epoch_us(started_at)) OVER (
            PARTITION BY source, session_id, provider
            ORDER BY started_at, source_index, request_id
        )                                                               AS gap_us
    FROM requests
    WHERE account IS NULL
),

runs AS (
    SELECT
        u.request_id,
        'no account: ' || coalesce(u.source, '') || ' | session ' || coalesce(u.session_id, '')
            || ' | run ' || sum(CASE WHEN u.gap_us > l.longest_us THEN 1 ELSE 0 END) OVER (
                PARTITION BY u.source, u.session_id, u.provider
                ORDER BY u.started_at, u.source_index, u.request_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)::VARCHAR AS run_scope
    FROM unscoped AS u
    CROSS JOIN longest AS l
),

-- `answer` is the model of a processed request (as prefix_requests.writes_cache); a refused
-- one takes the latest earlier answer to the same name in its account and provider, else the
-- next one
processed AS NOT MATERIALIZED (
    SELECT
        request_id, provider, account, requested_model, started_at, source, source_index, model,
        coalesce(CASE WHEN status_code IS NOT NULL THEN status_code BETWEEN 200 AND 299
                      ELSE outcome = 'ok' END, false)                   AS answered,
        hash(account, provider, requested_model)                        AS name_key
    FROM requests
),

refused AS (
    SELECT * FROM processed WHERE requested_model IS NOT NULL AND NOT answered
),

-- the refused requests and the answers to the names they asked for: the windows below need no
-- other row (most traffic is answered, so they stay small, where a window over every request
-- cost 8 s of 20 on 10M requests)
named AS (
    SELECT *, NULL::VARCHAR AS answer FROM refused
    UNION ALL
    SELECT *, model FROM processed
    WHERE answered AND model IS NOT NULL AND name_key IN (SELECT name_key FROM refused)
),

served AS (
    SELECT
        request_id,
        coalesce(
            last_value(answer IGNORE NULLS) OVER (
                PARTITION BY account, provider, requested_model
                ORDER BY started_at, source, source_index, request_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
            first_value(answer IGNORE NULLS) OVER (
                PARTITION BY account, provider, requested_model
                ORDER BY started_at, source, source_index, request_id
                ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING),
            model)                                                      AS served_model,
        answer IS NULL                                                  AS was_refused
    FROM named
),

final AS (
    SELECT
        coalesce(v.request_id, u.request_id)                            AS request_id,
        v.request_id IS NOT NULL                                        AS refused,
        v.served_model,
        u.run_scope
    FROM (SELECT * FROM served WHERE was_refused) AS v
    FULL OUTER JOIN runs AS u USING (request_id)
)

SELECT * FROM final
