-- name: report_daily_hit_ratio
-- inputs: requests
-- output: token-weighted hit ratio per UTC day and provider/model, for the weekly report's line
--   chart. Rows with unknown input or read are left out of the ratio and counted.
WITH source AS (
    SELECT
        *,
        date_trunc('week', day)::DATE AS week,
        coalesce(provider, 'unknown provider') || ' · ' || coalesce(model, 'unknown model')
            AS series
    FROM requests
),

final AS (
    SELECT
        week,
        day,
        series,
        any_value(provider)                                                 AS provider,
        any_value(model)                                                    AS model,
        count(*)::BIGINT                                                    AS requests,
        sum(cache_read_tokens) FILTER (
            WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL)::BIGINT
                                                                            AS ratio_read_tokens,
        sum(input_tokens) FILTER (
            WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL)::BIGINT
                                                                            AS ratio_input_tokens,
        (sum(cache_read_tokens) FILTER (
            WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL))::DOUBLE
            / nullif(sum(input_tokens) FILTER (
            WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL), 0)
                                                                            AS hit_ratio,
        count(*) FILTER (
            WHERE input_tokens IS NULL OR cache_read_tokens IS NULL)::BIGINT
                                                                            AS requests_excluded_from_ratio
    FROM source
    GROUP BY week, day, series
)

SELECT * FROM final
