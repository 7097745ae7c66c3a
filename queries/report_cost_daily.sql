-- name: report_cost_daily
-- inputs: request_costs
-- output: cost per UTC day and currency, the same cost the weekly headline sums
--   (request_costs.cost_total: a reported cost wins over the computed one), one row per part for
--   stacked bars: uncached input, cache read, cache write and output for computed costs (and web
--   search on a day whose requests paid a search fee), and one unsplit part for the costs the
--   provider reported, so the parts add up to the day's cost. Beside it the day's cost without caching
--   (the reference line) with the priced requests it leaves out counted. Every day with a
--   request has rows: the priced and unpriced counts are on every row of the day, and a day with
--   no priced request has one row with currency and part NULL.
WITH source AS (
    SELECT
        *,
        (started_at AT TIME ZONE 'UTC')::DATE                           AS day,
        -- as report_weekly_cost and cost_summary decide it, so the counts agree everywhere
        -- (request_costs gives every cost_total a currency)
        cost_total IS NOT NULL                                          AS priced
    FROM request_costs
),

priced AS (
    SELECT * FROM source WHERE priced
),

days AS (
    SELECT
        day,
        currency,
        count(*)::BIGINT                                                AS requests_priced,
        count(*) FILTER (WHERE cost_source = 'computed')::BIGINT        AS requests_computed,
        count(*) FILTER (WHERE cost_source = 'reported')::BIGINT        AS requests_reported,
        sum(cost_uncached_input) FILTER (WHERE cost_source = 'computed')
                                                                        AS uncached_input,
        sum(cost_cache_read) FILTER (WHERE cost_source = 'computed')    AS cache_read,
        -- No write tokens reported (DeepSeek, Gemini): the write buckets are NULL and those
        -- tokens are already in uncached input, so they add nothing here.
        sum(coalesce(cost_cache_write_5m, 0) + coalesce(cost_cache_write_1h, 0))
            FILTER (WHERE cost_source = 'computed')                     AS cache_write,
        sum(cost_output) FILTER (WHERE cost_source = 'computed')        AS output,
        sum(cost_web_search) FILTER (WHERE cost_source = 'computed')    AS web_search,
        sum(cost_request_fee) FILTER (WHERE cost_source = 'computed')   AS request_fee,
        sum(cost_total) FILTER (WHERE cost_source = 'reported')         AS reported,
        sum(cost_total)                                                 AS cost_day,
        sum(cost_without_cache)                                         AS cost_without_cache_day,
        count(*) FILTER (WHERE cost_without_cache IS NULL)::BIGINT      AS requests_without_cache_unknown
    FROM priced
    GROUP BY day, currency
),

unpriced AS (
    SELECT day, count(*) FILTER (WHERE NOT priced)::BIGINT AS requests_unpriced_day
    FROM source
    GROUP BY day
),

parts AS (
    SELECT day, currency, 1 AS part_order, 'uncached input' AS part, uncached_input AS cost
    FROM days WHERE requests_computed > 0
    UNION ALL SELECT day, currency, 2, 'cache read', cache_read FROM days WHERE requests_computed > 0
    UNION ALL SELECT day, currency, 3, 'cache write', cache_write FROM days WHERE requests_computed > 0
    UNION ALL SELECT day, currency, 4, 'output', output FROM days WHERE requests_computed > 0
    UNION ALL SELECT day, currency, 5, 'web search', web_search FROM days WHERE web_search > 0
    UNION ALL SELECT day, currency, 6, 'request fee', request_fee FROM days WHERE request_fee > 0
    UNION ALL SELECT day, currency, 7, 'reported by the provider', reported
    FROM days WHERE requests_reported > 0
),

priced_rows AS (
    SELECT
        p.day,
        p.currency,
        p.part_order,
        p.part,
        p.cost,
        d.cost_day,
        d.cost_without_cache_day,
        d.requests_without_cache_unknown,
        d.requests_priced
    FROM parts AS p
    JOIN days AS d USING (day, currency)
),

-- A day whose requests all went unpriced keeps one row, so its unpriced count is not lost.
unpriced_only_days AS (
    SELECT
        u.day,
        NULL::VARCHAR                                                   AS currency,
        NULL::INTEGER                                                   AS part_order,
        NULL::VARCHAR                                                   AS part,
        NULL::DOUBLE                                                    AS cost,
        NULL::DOUBLE                                                    AS cost_day,
        NULL::DOUBLE                                                    AS cost_without_cache_day,
        0::BIGINT                                                       AS requests_without_cache_unknown,
        0::BIGINT                                                       AS requests_priced
    FROM unpriced AS u
    WHERE NOT EXISTS (SELECT 1 FROM days AS d WHERE d.day = u.day)
),

final AS (
    SELECT
        date_trunc('week', r.day)::DATE                                 AS week,
        r.day,
        r.currency,
        r.part_order::INTEGER                                           AS part_order,
        r.part,
        r.cost,
        r.cost_day,
        r.cost_without_cache_day,
        r.requests_without_cache_unknown::BIGINT                        AS requests_without_cache_unknown,
        r.requests_priced::BIGINT                                       AS requests_priced,
        u.requests_unpriced_day
    FROM (SELECT * FROM priced_rows UNION ALL SELECT * FROM unpriced_only_days) AS r
    JOIN unpriced AS u USING (day)
)

SELECT * FROM final
