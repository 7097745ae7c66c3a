-- name: headline
-- inputs: requests
-- output: one row of headline numbers over the whole warehouse. Hit ratio is token-weighted,
--   sum(cache read) / sum(input), over rows where both are known; the rows left out are counted.
WITH source AS (
    SELECT * FROM requests
),

final AS (
    SELECT
        count(*)                                                        AS requests,
        count(*) FILTER (WHERE usage_status = 'missing')                AS requests_usage_unknown,
        sum(input_tokens)                                               AS input_tokens,
        sum(cache_read_tokens) FILTER (WHERE input_tokens IS NOT NULL)  AS cache_read_tokens,
        sum(input_tokens) FILTER (WHERE cache_read_tokens IS NOT NULL)  AS input_tokens_with_read_known,
        sum(cache_read_tokens) FILTER (WHERE input_tokens IS NOT NULL)::DOUBLE
            / nullif(sum(input_tokens) FILTER (WHERE cache_read_tokens IS NOT NULL), 0)
                                                                        AS hit_ratio,
        count(*) FILTER (WHERE input_tokens IS NULL OR cache_read_tokens IS NULL)
                                                                        AS requests_excluded_from_ratio,
        sum(output_tokens)                                              AS output_tokens,
        min(started_at)                                                 AS first_request_at,
        max(started_at)                                                 AS last_request_at
    FROM source
)

SELECT * FROM final
