-- name: report_provider_gap
-- inputs: expected_cache
-- output: per ISO week and provider/model, the cache read the provider's own rules would allow
--   (expected_cache.expected_read_tokens, an estimate) next to the read it reported, over
--   requests where both are known; the gap is what the provider did not deliver. Requests with
--   either unknown are counted.
WITH source AS (
    SELECT
        *,
        date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week,
        coalesce(provider, 'unknown provider') || ' · ' || coalesce(model, 'unknown model')
            AS series,
        expected_read_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL AS both_known
    FROM expected_cache
),

final AS (
    SELECT
        week,
        series,
        count(*)::BIGINT                                                AS requests,
        count(*) FILTER (WHERE NOT both_known)::BIGINT                  AS requests_unknown,
        sum(expected_read_tokens) FILTER (WHERE both_known)::BIGINT     AS expected_read_tokens,
        sum(cache_read_tokens) FILTER (WHERE both_known)::BIGINT        AS reported_read_tokens,
        sum(expected_read_tokens - cache_read_tokens) FILTER (WHERE both_known)::BIGINT
                                                                        AS gap_tokens,
        count(*) FILTER (
            WHERE both_known AND cache_read_tokens < expected_read_tokens)::BIGINT
                                                                        AS requests_short,
        (sum(cache_read_tokens) FILTER (WHERE both_known))::DOUBLE
            / nullif(sum(expected_read_tokens) FILTER (WHERE both_known), 0)
                                                                        AS delivered_ratio
    FROM source
    GROUP BY week, series
)

SELECT * FROM final
