-- name: summary_by
-- inputs: summary_requests
-- parameters: $dimension (day, model, agent or session), $since and $until (first and last UTC
--   day, inclusive; NULL: no bound). Run by `cacheaudit summary --by`, values bound, never
--   pasted.
-- output: one row per group (a day, a model, an agent or a session; NULL when the requests do
--   not say) of the requests in the date range: requests, input and cache read tokens, the
--   token-weighted hit ratio over the requests where both are known, cost and savings, the
--   tokens lost to cache breaks, and how many requests each figure leaves out as unknown.
--   Money is summed only when the group's priced requests share one currency (currency says
--   which; several: cost and saved NULL, currency lists them). Ordered by group.
WITH source AS (
    SELECT
        *,
        CASE $dimension
            WHEN 'day' THEN strftime(day, '%Y-%m-%d')
            WHEN 'model' THEN model
            WHEN 'agent' THEN agent
            WHEN 'session' THEN session_id
        END AS group_key
    FROM summary_requests
    -- without bounds every request counts, those with no start time (so no day) too: a
    -- cassette without Date headers is in the headline, and must be in the groups
    WHERE ($since IS NULL AND $until IS NULL)
       OR (day >= coalesce(CAST($since AS DATE), DATE '0001-01-01')
           AND day <= coalesce(CAST($until AS DATE), DATE '9999-12-31'))
),

grouped AS (
    SELECT
        group_key,
        count(*)                                                        AS requests,
        sum(input_tokens)::BIGINT                                       AS input_tokens,
        count(*) FILTER (WHERE input_tokens IS NULL)                    AS requests_input_unknown,
        sum(cache_read_tokens) FILTER (WHERE ratio_known)::BIGINT       AS cache_read_tokens,
        sum(input_tokens) FILTER (WHERE ratio_known)::BIGINT            AS ratio_input_tokens,
        count(*) FILTER (WHERE NOT ratio_known)                         AS requests_excluded_from_ratio,
        -- of the priced requests: an unpriced one has its price row's currency, but no money
        count(DISTINCT currency) FILTER (WHERE cost_total IS NOT NULL)  AS currencies,
        string_agg(DISTINCT currency, '+' ORDER BY currency)
            FILTER (WHERE cost_total IS NOT NULL)                       AS currency_list,
        sum(cost_total)                                                 AS cost_sum,
        sum(savings)                                                    AS savings_sum,
        count(*) FILTER (WHERE cost_total IS NULL)                      AS requests_unpriced,
        count(*) FILTER (WHERE cost_total IS NOT NULL AND savings IS NULL)
                                                                        AS requests_savings_unknown,
        sum(cache_breaks)::BIGINT                                       AS cache_breaks,
        sum(tokens_lost_to_breaks)::BIGINT                              AS tokens_lost_to_breaks,
        sum(breaks_loss_unknown)::BIGINT                                AS breaks_loss_unknown,
        count(*) FILTER (WHERE NOT breaks_known)                        AS requests_breaks_unknown,
        count(*) FILTER (WHERE simulated)                               AS requests_simulated
    FROM source
    GROUP BY group_key
),

final AS (
    SELECT
        group_key                                                       AS "group",
        requests,
        input_tokens,
        requests_input_unknown,
        cache_read_tokens,
        cache_read_tokens::DOUBLE / nullif(ratio_input_tokens, 0)       AS hit_ratio,
        requests_excluded_from_ratio,
        currency_list                                                   AS currency,
        CASE WHEN currencies = 1 THEN cost_sum END                      AS cost,
        CASE WHEN currencies = 1 THEN savings_sum END                   AS saved,
        requests_unpriced,
        requests_savings_unknown,
        cache_breaks,
        tokens_lost_to_breaks,
        breaks_loss_unknown,
        requests_breaks_unknown,
        requests_simulated
    FROM grouped
)

SELECT * FROM final ORDER BY "group" NULLS LAST
