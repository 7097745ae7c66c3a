-- name: summary_requests
-- inputs: requests, request_costs, cache_breaks
-- output: one row per request with what `cacheaudit summary --by` groups on (day, model, agent,
--   session) and what it adds up: tokens, whether input and cache read are both known (the
--   rows of the token-weighted hit ratio), cost and savings in the currency of the request's
--   price, the cache breaks of the request and the tokens they lost, and whether the simulator
--   answered. Unknown stays NULL; a request without a cache break lost 0 tokens to one; a
--   request without prompt segments (an OTel span that carried no content) cannot be analysed:
--   its breaks are unknown (breaks_known false), not 0.
WITH source AS (
    SELECT * FROM requests
),

costs AS (
    SELECT request_id, currency, cost_total, savings, unpriced_reason FROM request_costs
),

breaks AS (
    SELECT
        request_id,
        count(*)                                        AS cache_breaks,
        sum(tokens_lost)::BIGINT                        AS tokens_lost,
        count(*) FILTER (WHERE tokens_lost IS NULL)     AS breaks_loss_unknown
    FROM cache_breaks
    GROUP BY request_id
),

final AS (
    SELECT
        r.request_id,
        r.started_at,
        r.day,
        r.model,
        r.agent,
        r.session_id,
        r.simulated,
        r.input_tokens,
        r.cache_read_tokens,
        r.input_tokens IS NOT NULL AND r.cache_read_tokens IS NOT NULL AS ratio_known,
        r.output_tokens,
        c.currency,
        c.cost_total,
        c.savings,
        c.unpriced_reason,
        coalesce(r.segment_count, 0) > 0                            AS breaks_known,
        CASE WHEN coalesce(r.segment_count, 0) > 0 THEN coalesce(b.cache_breaks, 0) END::BIGINT
                                                                    AS cache_breaks,
        CASE WHEN coalesce(r.segment_count, 0) = 0 THEN NULL
             WHEN b.request_id IS NULL THEN 0::BIGINT ELSE b.tokens_lost END
                                                                    AS tokens_lost_to_breaks,
        coalesce(b.breaks_loss_unknown, 0)::BIGINT                  AS breaks_loss_unknown
    FROM source AS r
    LEFT JOIN costs AS c USING (request_id)
    LEFT JOIN breaks AS b USING (request_id)
)

SELECT * FROM final
