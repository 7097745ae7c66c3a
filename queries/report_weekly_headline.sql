-- name: report_weekly_headline
-- inputs: requests
-- output: one row per ISO week (week = its Monday, UTC) with the weekly report's headline token
--   numbers. Hit ratio is token-weighted over rows where input and read are both known; the
--   rows left out, the rows whose usage was not reported, and the rows left out of the input
--   sum (input unknown) and of the output sum (output unknown), are counted; so are the requests
--   the bundled simulator answered, whose cost is no bill.
WITH source AS (
    SELECT *, date_trunc('week', day)::DATE AS week FROM requests
),

final AS (
    SELECT
        week,
        count(*)::BIGINT                                                    AS requests,
        count(*) FILTER (WHERE usage_status = 'missing')::BIGINT            AS requests_usage_unknown,
        sum(input_tokens)::BIGINT                                           AS input_tokens,
        count(*) FILTER (WHERE input_tokens IS NULL)::BIGINT                AS requests_input_unknown,
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
                                                                            AS requests_excluded_from_ratio,
        sum(output_tokens)::BIGINT                                          AS output_tokens,
        count(*) FILTER (WHERE output_tokens IS NULL)::BIGINT               AS requests_output_unknown,
        min(day)                                                            AS first_day,
        max(day)                                                            AS last_day,
        count(DISTINCT day)::BIGINT                                         AS days_with_data,
        count(*) FILTER (WHERE simulated)::BIGINT                           AS requests_simulated
    FROM source
    GROUP BY week
)

SELECT * FROM final
