-- name: report_prefix_stability
-- inputs: prefix_stability
-- output: per ISO week, agent and prompt part (tools, system, history), how many turns changed
--   that part from the turn before: the weekly sum of prefix_stability's per-agent daily rows.
WITH source AS (
    SELECT *, date_trunc('week', day)::DATE AS week
    FROM prefix_stability
    WHERE scope = 'agent'
),

final AS (
    SELECT
        week,
        coalesce(agent, 'unknown agent')                        AS agent,
        part,
        sum(turns)::BIGINT                                      AS turns,
        sum(changed_turns)::BIGINT                              AS changed_turns,
        sum(changed_turns)::DOUBLE / nullif(sum(turns), 0)      AS change_rate
    FROM source
    GROUP BY week, coalesce(agent, 'unknown agent'), part
)

SELECT * FROM final
