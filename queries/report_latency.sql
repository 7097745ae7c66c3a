-- name: report_latency
-- inputs: requests
-- output: time to first answer text against cache-read share, binned in tenths, per ISO week and
--   delivery (streamed or not), for requests whose timing and usage were both recorded. Median
--   and 90th percentile per bin, with the count of requests behind each.
WITH source AS (
    SELECT
        *,
        date_trunc('week', day)::DATE AS week,
        CASE WHEN stream THEN 'streamed' WHEN NOT stream THEN 'not streamed' ELSE 'unknown' END
            AS delivery,
        least(floor(cache_read_tokens::DOUBLE / input_tokens * 10), 9)::INTEGER AS share_bin
    FROM requests
    WHERE ttft_ms IS NOT NULL
      AND input_tokens > 0
      AND cache_read_tokens IS NOT NULL
),

final AS (
    SELECT
        week,
        delivery,
        (share_bin / 10)::DOUBLE                        AS read_share_from,
        ((share_bin + 1) / 10)::DOUBLE                  AS read_share_to,
        count(*)::BIGINT                                AS requests,
        quantile_cont(ttft_ms, 0.5)                     AS ttft_p50_ms,
        quantile_cont(ttft_ms, 0.9)                     AS ttft_p90_ms,
        avg(input_tokens)                               AS mean_input_tokens
    FROM source
    GROUP BY week, delivery, share_bin
)

SELECT * FROM final
