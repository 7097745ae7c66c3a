-- name: report_break_causes
-- inputs: cache_breaks
-- output: cache breaks per ISO week and primary cause: how many requests lost a reusable prefix
--   for that cause, the tokens it cost (cache_breaks.tokens_lost; 0 for a cold start, which has
--   nothing earlier to reuse) summed over the breaks where it is known, the breaks whose loss is
--   unknown (counted, never summed as 0), and the conversations affected.
WITH source AS (
    SELECT *, date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week
    FROM cache_breaks
),

final AS (
    SELECT
        week,
        cause,
        count(*)::BIGINT                                AS breaks,
        sum(tokens_lost)::BIGINT                        AS tokens_lost,
        count(*) FILTER (WHERE tokens_lost IS NULL)::BIGINT
                                                        AS breaks_tokens_unknown,
        count(DISTINCT conversation_id)::BIGINT         AS conversations
    FROM source
    GROUP BY week, cause
)

SELECT * FROM final
