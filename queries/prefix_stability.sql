-- name: prefix_stability
-- inputs: conversations, request_prefix
-- output: how often each part of the prompt changed from one turn to the next, per agent and
--   day (scope = 'agent') and per conversation and day (scope = 'conversation'). Parts: tools
--   (the tool definitions, in order), system (system prompt and output schema), history (the
--   messages: changed when a turn does not extend its parent's history). Only turns with a
--   parent count (schemas/prefix_stability.json).
WITH pairs AS (
    SELECT
        -- NULL when not recorded (unknown is NULL; those turns group together, apart from any
        -- real agent name); report_prefix_stability labels it 'unknown agent' for the chart.
        c.agent                                                         AS agent,
        c.conversation_id,
        -- the UTC day, as every view has it: a bare ::DATE would take the session's zone
        -- (a DuckDB client of <warehouse>/cacheaudit.duckdb that did not SET TimeZone)
        (c.started_at AT TIME ZONE 'UTC')::DATE                         AS day,
        p.tools_hash IS DISTINCT FROM q.tools_hash                      AS tools_changed,
        p.system_hash IS DISTINCT FROM q.system_hash                    AS system_changed,
        NOT (p.before_last_reply_hash IS NOT DISTINCT FROM q.history_hash
             OR p.history_hash IS NOT DISTINCT FROM q.history_hash)     AS history_changed
    FROM conversations AS c
    JOIN request_prefix AS p USING (request_id)
    JOIN request_prefix AS q ON q.request_id = c.parent_request_id
),

parts AS (
    SELECT agent, conversation_id, day, 'tools' AS part, tools_changed AS changed FROM pairs
    UNION ALL
    SELECT agent, conversation_id, day, 'system', system_changed FROM pairs
    UNION ALL
    SELECT agent, conversation_id, day, 'history', history_changed FROM pairs
),

grouped AS (
    SELECT
        CASE WHEN GROUPING(conversation_id) = 1 THEN 'agent' ELSE 'conversation' END AS scope,
        agent, conversation_id, day, part,
        count(*)                                                        AS turns,
        count(*) FILTER (WHERE changed)                                 AS changed_turns
    FROM parts
    GROUP BY GROUPING SETS ((agent, day, part), (agent, conversation_id, day, part))
),

final AS (
    SELECT
        scope, agent, conversation_id, day, part,
        turns::BIGINT AS turns, changed_turns::BIGINT AS changed_turns,
        changed_turns / turns                                           AS change_rate
    FROM grouped
)

SELECT * FROM final
