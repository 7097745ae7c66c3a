-- name: expected_cache
-- inputs: requests, request_prefix, cache_rule_match
-- output: one row per request: the cache read the provider's own rules (table cache_rules)
--   would allow given the prefix still alive in its cache scope, next to the reported read, and
--   the gap (schemas/expected_cache.json). Token counts of a prefix are ESTIMATES: the request's
--   reported input tokens are given to its segments in proportion to their bytes, so a prefix
--   is only measured at segment boundaries. NULL = unknown (no input tokens, or no rule). A
--   request naming a Gemini explicit cache (cachedContent, request_prefix.explicit_cache) reads
--   a cache made outside the captured traffic, whose size the request does not show, so what it
--   can read is unknown too (Google bills an explicit cache as a guaranteed hit, whatever the
--   traffic before it).
WITH joined AS (
    SELECT
        p.request_id, p.started_at, p.provider, p.model, p.account, p.prompt_bytes,
        p.live_bytes, p.unit_bytes, p.breakpoint_bytes, p.marked_bytes, p.explicit_cache,
        r.input_tokens, r.cache_read_tokens,
        m.rule_id, m.unit_model, m.min_tokens, coalesce(m.granularity_tokens, 1) AS granularity,
        coalesce(
            -- the rule's extended lifetime when the request asked for it: Anthropic ttl 1h,
            -- OpenAI prompt_cache_retention 24h (recorded as cache_ttls '24h')
            CASE WHEN r.cache_write_1h_tokens > 0 OR list_contains(r.cache_ttls, '1h')
                   OR list_contains(r.cache_ttls, '24h')
                 THEN m.extended_lifetime_s END,
            m.lifetime_s
        )                                                               AS lifetime_s,
        m.lifetime_s                                                    AS default_lifetime_s,
        m.extended_lifetime_s
    FROM request_prefix AS p
    JOIN requests AS r USING (request_id)
    LEFT JOIN cache_rule_match AS m
      ON m.provider IS NOT DISTINCT FROM r.provider
     AND m.model IS NOT DISTINCT FROM r.model
     AND m.day = r.day
),

reusable AS (
    SELECT
        *,
        CASE unit_model
            WHEN 'none' THEN 0
            WHEN 'prefix' THEN live_bytes
            WHEN 'prefix_minus_last' THEN live_bytes
            WHEN 'breakpoint' THEN coalesce(breakpoint_bytes, 0)
            WHEN 'persisted_units' THEN least(coalesce(unit_bytes, 0), prompt_bytes)
        END                                                             AS reusable_bytes
    FROM joined
),

tokens AS (
    SELECT
        *,
        CASE WHEN prompt_bytes > 0
             THEN round(input_tokens * live_bytes / prompt_bytes)::BIGINT END AS live_tokens_est,
        -- what a later request could read from the entry this one left, before the rule's
        -- minimum and granularity: the whole prompt, all but its last token (vLLM), or up to
        -- its last cache_control breakpoint
        CASE
            WHEN unit_model = 'none' THEN 0
            WHEN unit_model = 'breakpoint' THEN
                CASE WHEN prompt_bytes > 0
                     THEN round(input_tokens * coalesce(marked_bytes, 0) / prompt_bytes) END
            WHEN unit_model = 'prefix_minus_last' THEN greatest(input_tokens - 1, 0)
            WHEN unit_model IS NOT NULL THEN input_tokens
        END::BIGINT                                                     AS cacheable_tokens_est,
        CASE WHEN prompt_bytes > 0 THEN
            CASE WHEN unit_model = 'prefix_minus_last'
                 THEN least(round(input_tokens * reusable_bytes / prompt_bytes), input_tokens - 1)
                 ELSE round(input_tokens * reusable_bytes / prompt_bytes)
            END::BIGINT
        END                                                             AS reusable_tokens_est
    FROM reusable
),

expected AS (
    SELECT
        *,
        CASE
            WHEN explicit_cache THEN NULL
            WHEN unit_model = 'none' THEN 0
            WHEN reusable_tokens_est IS NULL THEN NULL
            WHEN reusable_tokens_est < coalesce(min_tokens, 0) THEN 0
            ELSE reusable_tokens_est // granularity * granularity
        END::BIGINT                                                     AS expected_read_tokens
    FROM tokens
),

final AS (
    SELECT
        request_id, started_at, provider, model, account, rule_id, unit_model,
        input_tokens,
        live_tokens_est,
        reusable_tokens_est,
        cacheable_tokens_est,
        expected_read_tokens,
        cache_read_tokens,
        (expected_read_tokens - cache_read_tokens)::BIGINT              AS gap_tokens,
        min_tokens, granularity AS granularity_tokens, lifetime_s, default_lifetime_s,
        extended_lifetime_s,
        'bytes_proportional'                                            AS tokens_basis
    FROM expected
)

SELECT * FROM final
