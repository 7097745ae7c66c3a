-- name: cost_summary
-- inputs: request_costs, price_digest_source
-- output: one row per currency of the priced requests (never converted), plus one row with
--   currency NULL for the requests that could not be priced (when some could not), their
--   count by reason. Every row repeats the coverage: share of requests and of tokens priced,
--   over the whole warehouse.
--   Priced means cost_total IS NOT NULL, as in report_weekly_cost and report_cost_daily:
--   request_costs gives every cost_total a currency (a reported cost of unknown currency is
--   not a cost_total), so the priced rows are exactly the rows with a currency here.
WITH source AS (
    SELECT * FROM request_costs
),

coverage AS (
    SELECT
        count(*)                                                        AS requests_all,
        count(*) FILTER (WHERE cost_total IS NOT NULL)::DOUBLE
            / nullif(count(*), 0)                                       AS share_requests_priced,
        sum(input_tokens + output_tokens) FILTER (WHERE cost_total IS NOT NULL)::DOUBLE
            / nullif(sum(input_tokens + output_tokens), 0)              AS share_tokens_priced,
        count(*) FILTER (WHERE cost_total IS NULL)                      AS requests_unpriced
    FROM source
),

reasons AS (
    SELECT string_agg(reason || '=' || n, '; ' ORDER BY n DESC, reason) AS unpriced_reasons
    FROM (
        SELECT coalesce(unpriced_reason, 'unknown') AS reason, count(*) AS n
        FROM source
        WHERE cost_total IS NULL
        GROUP BY 1
    )
),

per_currency AS (
    SELECT
        currency,
        count(*)                                                        AS requests,
        count(*) FILTER (WHERE cost_source = 'reported')                AS requests_reported_cost,
        sum(input_tokens)::BIGINT                                       AS input_tokens,
        sum(cache_read_tokens)::BIGINT                                  AS cache_read_tokens,
        sum(output_tokens)::BIGINT                                      AS output_tokens,
        count(*) FILTER (WHERE output_tokens IS NULL)                   AS requests_output_unknown,
        count(*) FILTER (WHERE input_tokens IS NULL)                    AS requests_input_unknown,
        count(*) FILTER (WHERE cache_read_tokens IS NULL)               AS requests_cache_read_unknown,
        sum(cost_total)                                                 AS cost_total,
        sum(cost_without_cache) FILTER (WHERE savings IS NOT NULL)      AS cost_without_cache,
        sum(savings)                                                    AS savings,
        count(*) FILTER (WHERE savings IS NULL)                         AS requests_savings_unknown,
        sum(cost_if_ideal) FILTER (WHERE left_on_table IS NOT NULL)     AS cost_if_ideal,
        sum(left_on_table)                                              AS left_on_table,
        count(*) FILTER (WHERE left_on_table IS NULL)                   AS requests_ideal_unknown
    FROM source
    WHERE cost_total IS NOT NULL
    GROUP BY currency
),

unpriced AS (
    SELECT
        NULL::VARCHAR                                                   AS currency,
        count(*)                                                        AS requests,
        0::BIGINT                                                       AS requests_reported_cost,
        sum(input_tokens)::BIGINT                                       AS input_tokens,
        sum(cache_read_tokens)::BIGINT                                  AS cache_read_tokens,
        sum(output_tokens)::BIGINT                                      AS output_tokens,
        count(*) FILTER (WHERE output_tokens IS NULL)                   AS requests_output_unknown,
        count(*) FILTER (WHERE input_tokens IS NULL)                    AS requests_input_unknown,
        count(*) FILTER (WHERE cache_read_tokens IS NULL)               AS requests_cache_read_unknown,
        NULL::DOUBLE AS cost_total, NULL::DOUBLE AS cost_without_cache, NULL::DOUBLE AS savings,
        count(*)                                                        AS requests_savings_unknown,
        NULL::DOUBLE AS cost_if_ideal, NULL::DOUBLE AS left_on_table,
        count(*)                                                        AS requests_ideal_unknown
    FROM source
    WHERE cost_total IS NULL
    -- no row when every request is priced (or there is none): a NULL-currency row of 0
    -- requests read as a currency of its own; the unpriced count stays on every row (coverage)
    HAVING count(*) > 0
),

final AS (
    SELECT b.*, c.*, r.unpriced_reasons, d.price_digest
    FROM (SELECT * FROM per_currency UNION ALL SELECT * FROM unpriced) AS b
    CROSS JOIN coverage AS c
    CROSS JOIN reasons AS r
    CROSS JOIN price_digest_source AS d
)

SELECT * FROM final ORDER BY currency NULLS LAST
