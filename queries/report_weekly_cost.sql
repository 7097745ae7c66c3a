-- name: report_weekly_cost
-- inputs: request_costs
-- output: the weekly report's cost headline, one row per ISO week and currency (no silent
--   conversion): cost, cost without caching, savings, left on the table, over priced requests,
--   with the priced requests whose savings or left on the table is unknown counted; beside them
--   the week's requests with no price (all currencies), counted, never hidden.
--   A week with no priced request gets one row with currency NULL.
WITH source AS (
    SELECT
        *,
        date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week,
        -- priced as in cost_summary and report_cost_daily (request_costs gives every
        -- cost_total a currency; a reported cost of unknown currency is not a cost_total)
        cost_total IS NOT NULL                                          AS priced
    FROM request_costs
),

weeks AS (
    SELECT
        week,
        count(*) FILTER (WHERE NOT priced)::BIGINT                      AS requests_unpriced_week,
        string_agg(DISTINCT price_digest, ', ' ORDER BY price_digest)   AS price_digest
    FROM source
    GROUP BY week
),

by_currency AS (
    SELECT
        week,
        currency,
        count(*)::BIGINT                                                AS requests_priced,
        sum(cost_total)                                                 AS cost_total,
        sum(cost_without_cache)                                         AS cost_without_cache,
        sum(savings)                                                    AS savings,
        count(*) FILTER (WHERE savings IS NULL)::BIGINT                 AS requests_savings_unknown,
        sum(left_on_table)                                              AS left_on_table,
        count(*) FILTER (WHERE left_on_table IS NULL)::BIGINT           AS requests_left_unknown
    FROM source
    WHERE priced
    GROUP BY week, currency
),

final AS (
    SELECT
        w.week,
        c.currency,
        coalesce(c.requests_priced, 0)::BIGINT                          AS requests_priced,
        c.cost_total,
        c.cost_without_cache,
        c.savings,
        coalesce(c.requests_savings_unknown, 0)::BIGINT                 AS requests_savings_unknown,
        c.left_on_table,
        coalesce(c.requests_left_unknown, 0)::BIGINT                    AS requests_left_unknown,
        w.requests_unpriced_week,
        w.price_digest
    FROM weeks AS w
    LEFT JOIN by_currency AS c USING (week)
)

SELECT * FROM final
