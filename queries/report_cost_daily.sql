-- name: report_cost_daily
-- inputs: request_costs
-- output: computed cost per UTC day and currency split into uncached input, cache read, cache
--   write and output (one row per part, for stacked bars), with the day's cost without caching
--   beside it (the reference line). Only requests with a computed cost are in it; their count
--   and the day's unpriced count are on every row of the day.
WITH source AS (
    SELECT
        *,
        (started_at AT TIME ZONE 'UTC')::DATE                           AS day
    FROM request_costs
),

priced AS (
    SELECT * FROM source WHERE cost_computed IS NOT NULL AND currency IS NOT NULL
),

days AS (
    SELECT
        day,
        currency,
        count(*)::BIGINT                                                AS requests_priced,
        sum(cost_uncached_input)                                        AS uncached_input,
        sum(cost_cache_read)                                            AS cache_read,
        -- No write tokens reported (DeepSeek, Gemini): the write buckets are NULL and those
        -- tokens are already in uncached input, so they add nothing here.
        sum(coalesce(cost_cache_write_5m, 0) + coalesce(cost_cache_write_1h, 0))
                                                                        AS cache_write,
        sum(cost_output)                                                AS output,
        sum(cost_computed)                                              AS cost_day,
        sum(cost_without_cache)                                         AS cost_without_cache_day
    FROM priced
    GROUP BY day, currency
),

unpriced AS (
    SELECT day, count(*)::BIGINT AS requests_unpriced_day
    FROM source
    WHERE cost_computed IS NULL OR currency IS NULL
    GROUP BY day
),

parts AS (
    SELECT day, currency, 1 AS part_order, 'uncached input' AS part, uncached_input AS cost FROM days
    UNION ALL SELECT day, currency, 2, 'cache read', cache_read FROM days
    UNION ALL SELECT day, currency, 3, 'cache write', cache_write FROM days
    UNION ALL SELECT day, currency, 4, 'output', output FROM days
),

final AS (
    SELECT
        date_trunc('week', p.day)::DATE                                 AS week,
        p.day,
        p.currency,
        p.part_order::INTEGER                                           AS part_order,
        p.part,
        p.cost,
        d.cost_day,
        d.cost_without_cache_day,
        d.requests_priced,
        coalesce(u.requests_unpriced_day, 0)::BIGINT                    AS requests_unpriced_day
    FROM parts AS p
    JOIN days AS d USING (day, currency)
    LEFT JOIN unpriced AS u USING (day)
)

SELECT * FROM final
