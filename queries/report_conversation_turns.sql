-- name: report_conversation_turns
-- inputs: conversations, requests, expected_cache, cache_breaks, break_costs
-- output: one row per turn of every conversation, for the conversation page: input tokens
--   split into cache read and uncached (miss), the read the provider's rules allowed, and the
--   cache-break cause with its diff excerpt where the prefix broke, and the money the break
--   lost at the price in force that day (NULL when its loss or price is unknown).
WITH final AS (
    SELECT
        c.conversation_id,
        c.turn,
        c.request_id,
        c.started_at,
        c.agent,
        r.provider,
        r.model,
        r.input_tokens,
        r.cache_read_tokens,
        r.cache_read_tokens                                     AS read_tokens,
        r.input_tokens - r.cache_read_tokens                    AS miss_tokens,
        e.expected_read_tokens,
        b.cause,
        b.change_class,
        b.changed_kind,
        b.tokens_lost,
        k.lost_cost,
        k.currency,
        b.excerpt
    FROM conversations AS c
    JOIN requests AS r USING (request_id)
    LEFT JOIN expected_cache AS e USING (request_id)
    LEFT JOIN cache_breaks AS b USING (request_id)
    LEFT JOIN break_costs AS k USING (request_id)
)

SELECT * FROM final
