-- name: headline
-- inputs: requests
-- output: one row of headline numbers over the whole warehouse. Hit ratio is token-weighted,
--   sum(cache read) / sum(input), over rows where both are known; the rows left out are counted,
--   and so are the rows left out of the input sum (input unknown, whether or not usage was
--   reported) and of the output sum (output unknown, e.g. a stream cut after the input counts
--   arrived). Requests the bundled simulator answered are counted: their cost is no bill.
WITH source AS (
    SELECT * FROM requests
),

both_known AS (
    SELECT * FROM source
    WHERE input_tokens IS NOT NULL AND cache_read_tokens IS NOT NULL
),

ratio AS (
    SELECT
        sum(cache_read_tokens)::BIGINT AS read_tokens,
        sum(input_tokens)::BIGINT      AS input_tokens
    FROM both_known
),

final AS (
    SELECT
        count(*)                                                AS requests,
        count(*) FILTER (WHERE usage_status = 'missing')        AS requests_usage_unknown,
        sum(input_tokens)::BIGINT                               AS input_tokens,
        count(*) FILTER (WHERE input_tokens IS NULL)            AS requests_input_unknown,
        (SELECT read_tokens FROM ratio)                         AS cache_read_tokens,
        (SELECT input_tokens FROM ratio)                        AS input_tokens_with_read_known,
        (SELECT read_tokens::DOUBLE / nullif(input_tokens, 0) FROM ratio)
                                                                AS hit_ratio,
        count(*) FILTER (WHERE input_tokens IS NULL OR cache_read_tokens IS NULL)
                                                                AS requests_excluded_from_ratio,
        sum(output_tokens)::BIGINT                              AS output_tokens,
        count(*) FILTER (WHERE output_tokens IS NULL)           AS requests_output_unknown,
        count(*) FILTER (WHERE simulated)                       AS requests_simulated,
        min(started_at)                                         AS first_request_at,
        max(started_at)                                         AS last_request_at
    FROM source
)

SELECT * FROM final
