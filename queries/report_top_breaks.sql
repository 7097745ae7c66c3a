-- name: report_top_breaks
-- inputs: cache_breaks
-- output: the ten conversations per ISO week that lost the most tokens to cache breaks, with
--   their agent, the cause that cost them most, and the diff excerpt of their costliest break
--   (already redacted and short in cache_breaks). Cold starts cost nothing and are left out.
--   The model is that of the costliest break (a conversation may switch models), the agent the
--   first by name: never "any" row's, which followed the order of the stored files and so
--   differed between a build after an ingest and a build from scratch of the same rows.
--   tokens_lost sums the breaks whose loss is known; those with an unknown loss are counted
--   beside it (breaks_tokens_unknown), never summed as 0.
WITH source AS (
    SELECT *, date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week
    FROM cache_breaks
    WHERE cause <> 'cold_start'
),

per_conversation AS (
    SELECT
        week,
        conversation_id,
        min(agent)                                      AS agent,
        min(model)                                      AS any_model,
        count(*)::BIGINT                                AS breaks,
        sum(tokens_lost)::BIGINT                        AS tokens_lost,
        count(*) FILTER (WHERE tokens_lost IS NULL)::BIGINT
                                                        AS breaks_tokens_unknown
    FROM source
    GROUP BY week, conversation_id
),

costliest AS (
    SELECT week, conversation_id, cause, change_class, changed_kind, excerpt, turn, model
    FROM source
    QUALIFY row_number() OVER (
        PARTITION BY week, conversation_id
        ORDER BY tokens_lost DESC NULLS LAST, turn, request_id
    ) = 1
),

by_cause AS (
    SELECT week, conversation_id, cause, sum(tokens_lost) AS cause_tokens
    FROM source
    GROUP BY week, conversation_id, cause
    QUALIFY row_number() OVER (
        PARTITION BY week, conversation_id ORDER BY cause_tokens DESC NULLS LAST, cause
    ) = 1
),

final AS (
    SELECT
        p.week,
        row_number() OVER (
            PARTITION BY p.week ORDER BY p.tokens_lost DESC NULLS LAST, p.conversation_id
        )::BIGINT                                       AS rank,
        p.conversation_id,
        p.agent,
        coalesce(c.model, p.any_model)                  AS model,
        p.breaks,
        p.tokens_lost,
        p.breaks_tokens_unknown,
        m.cause                                         AS main_cause,
        c.cause                                         AS costliest_cause,
        c.change_class,
        c.changed_kind,
        c.turn                                          AS costliest_turn,
        c.excerpt
    FROM per_conversation AS p
    JOIN by_cause AS m USING (week, conversation_id)
    JOIN costliest AS c USING (week, conversation_id)
    QUALIFY rank <= 10
)

SELECT * FROM final
