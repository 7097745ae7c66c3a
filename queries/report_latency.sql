-- name: report_latency
-- inputs: requests
-- output: time to first answer text against cache-read share, binned in tenths, per ISO week and
--   delivery (streamed or not), for requests whose timing and usage were both recorded. Median
--   and 90th percentile per bin, with the count of requests behind each, and on every row of a
--   week the count of the week's requests left out (time to first text, input or cache read not
--   recorded, or an empty prompt).
WITH weeks AS (
    SELECT
        *,
        date_trunc('week', day)::DATE AS week,
        coalesce(ttft_ms IS NOT NULL AND input_tokens > 0 AND cache_read_tokens IS NOT NULL,
                 false)                                  AS charted
    FROM requests
),

source AS (
    SELECT
        *,
        CASE WHEN stream THEN 'streamed' WHEN NOT stream THEN 'not streamed' ELSE 'unknown' END
            AS delivery,
        least(floor(cache_read_tokens::DOUBLE / input_tokens * 10), 9)::INTEGER AS share_bin
    FROM weeks
    WHERE charted
),

left_out AS (
    SELECT week, count(*) FILTER (WHERE NOT charted)::BIGINT AS requests_left_out
    FROM weeks
    GROUP BY week
),

bins AS (
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
),

final AS (
    SELECT b.*, l.requests_left_out
    FROM bins AS b
    JOIN left_out AS l USING (week)
)

SELECT * FROM final
