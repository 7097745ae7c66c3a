-- name: break_costs
-- inputs: cache_breaks, request_costs, requests, price_rows_source
-- output: one row per cache_breaks row with the money the break cost, at the price row
--   request_costs chose for that request (its time, alias, conditions such as an off-peak
--   window: one resolution, not a copy of it), in that row's currency.
--   lost_cost = tokens_lost x (uncached input price - cache read price): what the lost tokens
--   cost as a miss beyond what they would have cost as a read; plus the write premium the
--   break forced where the request wrote its prefix again: the lost tokens that were written
--   (at most the request's reported writes; 1h writes first, as they come first in the prefix,
--   the order request_costs uses for its ideal) x (that write price - uncached input price).
--   A provider without a write fee (its write price is the miss price, or no write is reported:
--   DeepSeek, OpenAI, Gemini implicit caching) adds no premium.
--   Unknown is NULL with lost_cost_unpriced_reason, never 0: the loss unknown, no price row in
--   force, a price missing from the row, or a write lifetime split unknown. A loss of 0 costs 0
--   even without a price.
WITH breaks AS (
    SELECT
        b.request_id, b.conversation_id, b.turn, b.started_at, b.agent, b.provider, b.model,
        b.cause, b.tokens_lost,
        c.price_row, c.unpriced_reason,
        c.cache_write_5m_tokens AS w5m, c.cache_write_1h_tokens AS w1h,
        r.cache_write_tokens AS writes,
        p.currency, p.input_cache_miss_per_mtok AS p_miss, p.input_cache_hit_per_mtok AS p_hit,
        p.cache_write_5m_per_mtok AS p_w5m, p.cache_write_1h_per_mtok AS p_w1h
    FROM cache_breaks AS b
    LEFT JOIN request_costs AS c USING (request_id)
    LEFT JOIN requests AS r USING (request_id)
    LEFT JOIN price_rows_source AS p ON p.row_id = c.price_row
),

-- the lost tokens the request wrote again: 1h writes first, then 5m. An unreported write
-- count is no write (the dialect has none; request_costs prices it as uncached input).
written AS (
    SELECT
        *,
        CASE WHEN w5m IS NULL AND w1h IS NULL THEN 0
             ELSE least(tokens_lost, coalesce(w1h, 0)) END              AS lost_w1h,
        CASE WHEN w5m IS NULL AND w1h IS NULL THEN 0
             ELSE least(tokens_lost - least(tokens_lost, coalesce(w1h, 0)), coalesce(w5m, 0))
        END                                                             AS lost_w5m,
        -- writes reported but their 5m/1h split unknown (request_costs' cache_write_ttl_unknown,
        -- which it names only when input, read and output are known: a cut stream's writes
        -- are just as unsplit)
        writes IS NOT NULL AND w1h IS NULL                              AS split_unknown
    FROM breaks
),

priced AS (
    SELECT
        *,
        CASE
            WHEN tokens_lost IS NULL THEN 'loss_unknown'
            WHEN tokens_lost = 0 THEN NULL
            WHEN price_row IS NULL AND unpriced_reason IN ('model_unknown', 'no_price_at_time',
                 'no_price_for_model', 'time_unknown') THEN unpriced_reason
            WHEN price_row IS NULL THEN 'no_price_row'
            WHEN p_miss IS NULL THEN 'no_price_for_uncached_input'
            WHEN p_hit IS NULL THEN 'no_price_for_cache_read'
            WHEN split_unknown THEN 'cache_write_ttl_unknown'
            WHEN lost_w5m > 0 AND p_w5m IS NULL THEN 'no_price_for_cache_write_5m'
            WHEN lost_w1h > 0 AND p_w1h IS NULL THEN 'no_price_for_cache_write_1h'
        END                                                             AS lost_cost_unpriced_reason
    FROM written
),

amounts AS (
    SELECT
        request_id, conversation_id, turn, started_at, agent, provider, model, cause,
        tokens_lost,
        lost_w5m::BIGINT                                                AS lost_written_5m_tokens,
        lost_w1h::BIGINT                                                AS lost_written_1h_tokens,
        price_row,
        CASE WHEN tokens_lost > 0 AND lost_cost_unpriced_reason IS NULL THEN currency END
                                                                        AS currency,
        CASE
            WHEN tokens_lost = 0 THEN 0::DOUBLE
            WHEN lost_cost_unpriced_reason IS NULL
                THEN tokens_lost * (p_miss - p_hit) / 1e6
        END                                                             AS lost_read_cost,
        CASE
            WHEN tokens_lost = 0 THEN 0::DOUBLE
            WHEN lost_cost_unpriced_reason IS NULL
                THEN CASE WHEN lost_w5m = 0 THEN 0::DOUBLE ELSE lost_w5m * (p_w5m - p_miss) / 1e6 END
                     + CASE WHEN lost_w1h = 0 THEN 0::DOUBLE ELSE lost_w1h * (p_w1h - p_miss) / 1e6 END
        END                                                             AS lost_write_premium,
        lost_cost_unpriced_reason
    FROM priced
),

final AS (
    SELECT *, lost_read_cost + lost_write_premium                       AS lost_cost
    FROM amounts
)

SELECT * FROM final ORDER BY started_at, request_id
