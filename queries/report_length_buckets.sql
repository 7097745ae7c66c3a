-- name: report_length_buckets
-- inputs: requests
-- output: token-weighted hit ratio per ISO week and input-length bucket, with the raw counts
--   beside it: a ratio is only comparable between requests of similar length. Requests whose
--   input is unknown form their own bucket (no ratio).
WITH source AS (
    SELECT
        *,
        date_trunc('week', day)::DATE AS week,
        CASE
            WHEN input_tokens IS NULL THEN 7
            WHEN input_tokens < 1024 THEN 1
            WHEN input_tokens < 4096 THEN 2
            WHEN input_tokens < 16384 THEN 3
            WHEN input_tokens < 65536 THEN 4
            WHEN input_tokens < 200000 THEN 5
            ELSE 6
        END AS bucket_order
    FROM requests
),

labelled AS (
    SELECT
        *,
        CASE bucket_order
            WHEN 1 THEN 'under 1K'
            WHEN 2 THEN '1K-4K'
            WHEN 3 THEN '4K-16K'
            WHEN 4 THEN '16K-64K'
            WHEN 5 THEN '64K-200K'
            WHEN 6 THEN '200K and over'
            ELSE 'input unknown'
        END AS bucket
    FROM source
),

final AS (
    SELECT
        week,
        bucket_order,
        bucket,
        count(*)::BIGINT                                                    AS requests,
        count(*) FILTER (
            WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL)::BIGINT
                                                                            AS requests_in_ratio,
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
                                                                            AS hit_ratio
    FROM labelled
    GROUP BY week, bucket_order, bucket
)

SELECT * FROM final
