-- name: prefix_hygiene
-- inputs: cache_breaks, conversations, segments, raw_segment_content
-- output: findings a team can act on before the next deploy, per agent (per conversation when
--   the agent is unknown), each with an example request, the position, a redacted excerpt and
--   the tokens it cost per affected turn (schemas/prefix_hygiene.json):
--   volatile_content     a time, date, id or counter inside the tools or system prompt;
--   dynamic_before_stable  tools or system prompt change on most turns while the history after
--                        them is kept: move the changing part after the history;
--   history_rewritten    earlier messages edited, dropped or summarised between turns;
--   orphan_tool_call / orphan_tool_result  a tool call without its result, or a result without
--                        its call, in the latest history of a conversation.
WITH subjects AS (
    SELECT
        c.request_id, c.conversation_id, c.turn, c.started_at,
        CASE WHEN c.agent IS NULL THEN 'conversation' ELSE 'agent' END  AS subject_kind,
        coalesce(c.agent, c.conversation_id)                            AS subject
    FROM conversations AS c
),

turn_counts AS (
    SELECT subject_kind, subject, count(*) FILTER (WHERE turn > 1) AS later_turns
    FROM subjects
    GROUP BY ALL
),

breaks AS (
    SELECT b.*, s.subject_kind, s.subject
    FROM cache_breaks AS b
    JOIN subjects AS s USING (request_id)
),

-- Each finding's example is ONE row, the one that lost most tokens (ties and unknown counts:
-- lowest request_id), so its request, conversation, position and excerpt agree and a rerun
-- picks the same one; `pick` ranks the rows, the aggregates take the example from pick = 1.
volatile_breaks AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY subject_kind, subject
                           ORDER BY tokens_lost DESC NULLS LAST, request_id ASC) AS pick
    FROM breaks
    WHERE cause IN ('tools_changed', 'system_changed')
      AND change_class IN ('timestamp', 'uuid', 'counter')
),

volatile AS (
    SELECT
        subject_kind, subject, 'volatile_content' AS finding,
        max(request_id) FILTER (WHERE pick = 1) AS example_request_id,
        max(conversation_id) FILTER (WHERE pick = 1) AS conversation_id,
        max(changed_position) FILTER (WHERE pick = 1) AS position,
        max(excerpt) FILTER (WHERE pick = 1) AS excerpt,
        count(*) AS turns_affected,
        avg(tokens_lost) AS tokens_per_turn,
        string_agg(DISTINCT changed_kind || ': ' || change_class, ', '
                   ORDER BY changed_kind || ': ' || change_class) AS detail
    FROM volatile_breaks
    GROUP BY subject_kind, subject
),

dynamic_breaks AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY subject_kind, subject
                           ORDER BY tokens_lost DESC NULLS LAST, request_id ASC) AS pick
    FROM breaks
    WHERE cause IN ('tools_changed', 'system_changed')
),

dynamic AS (
    SELECT
        b.subject_kind, b.subject, 'dynamic_before_stable' AS finding,
        max(b.request_id) FILTER (WHERE b.pick = 1) AS example_request_id,
        max(b.conversation_id) FILTER (WHERE b.pick = 1) AS conversation_id,
        max(b.changed_position) FILTER (WHERE b.pick = 1) AS position,
        max(b.excerpt) FILTER (WHERE b.pick = 1) AS excerpt,
        count(*) AS turns_affected,
        avg(b.tokens_lost) AS tokens_per_turn,
        string_agg(DISTINCT b.changed_kind, ', ' ORDER BY b.changed_kind) || ' changed on '
            || count(*) || ' of ' || any_value(t.later_turns) || ' later turns' AS detail
    FROM dynamic_breaks AS b
    JOIN turn_counts AS t USING (subject_kind, subject)
    GROUP BY b.subject_kind, b.subject
    HAVING count(*) > 0.5 * any_value(t.later_turns)
),

rewritten_breaks AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY subject_kind, subject
                           ORDER BY tokens_lost DESC NULLS LAST, request_id ASC) AS pick
    FROM breaks
    WHERE cause = 'history_rewritten'
),

rewritten AS (
    SELECT
        subject_kind, subject, 'history_rewritten' AS finding,
        max(request_id) FILTER (WHERE pick = 1) AS example_request_id,
        max(conversation_id) FILTER (WHERE pick = 1) AS conversation_id,
        max(changed_position) FILTER (WHERE pick = 1) AS position,
        max(excerpt) FILTER (WHERE pick = 1) AS excerpt,
        count(*) AS turns_affected,
        avg(tokens_lost) AS tokens_per_turn,
        string_agg(DISTINCT change_class, ', ' ORDER BY change_class) AS detail
    FROM rewritten_breaks
    GROUP BY subject_kind, subject
),

-- tool calls and results in the latest request of each conversation (its history has them all);
-- two requests at the same turn (a fork, a resend): the later started, then the higher
-- request_id, so the pick does not depend on the order the stored files are read in
latest AS (
    SELECT s.*
    FROM subjects AS s
    QUALIFY row_number() OVER (
        PARTITION BY conversation_id ORDER BY turn DESC, started_at DESC NULLS LAST, request_id DESC
    ) = 1
),

-- only segments that can hold a tool call or result: filtered before deduplicating (as view
-- segment_content does) so the warehouse's other distinct segments are never grouped
tool_content AS (
    SELECT segment_hash, any_value(content) AS content
    FROM raw_segment_content
    WHERE contains(content, 'tool_call') OR contains(content, 'tool_use')
       OR contains(content, 'tool_result')
    GROUP BY segment_hash
),

tool_messages AS (
    SELECT
        l.subject_kind, l.subject, l.request_id, l.conversation_id, g.position, g.role,
        c.content
    FROM latest AS l
    JOIN segments AS g ON g.request_id = l.request_id
    JOIN tool_content AS c ON c.segment_hash = g.segment_hash
    WHERE g.kind = 'message' AND g.role IN ('assistant', 'tool', 'user')
),

tool_ids AS (
    SELECT
        *,
        list_concat(
            coalesce(json_extract_string(content, '$.tool_calls[*].id'), []),
            coalesce(list_filter(
                json_extract_string(content, '$.content[*].id'),
                lambda i: i IS NOT NULL
            ), [])
        )                                                               AS call_ids,
        list_concat(
            CASE WHEN role = 'tool'
                 THEN [json_extract_string(content, '$.tool_call_id')] ELSE [] END,
            coalesce(list_filter(
                json_extract_string(content, '$.content[*].tool_use_id'),
                lambda i: i IS NOT NULL
            ), [])
        )                                                               AS result_ids
    FROM tool_messages
    WHERE json_valid(content)
),

calls AS (
    SELECT subject_kind, subject, request_id, conversation_id, position, content,
           unnest(call_ids) AS id
    FROM tool_ids
),

results AS (
    SELECT subject_kind, subject, request_id, conversation_id, position, content,
           unnest(result_ids) AS id
    FROM tool_ids
),

orphans AS (
    SELECT c.*, 'orphan_tool_call' AS finding
    FROM calls AS c
    ANTI JOIN results AS r ON r.conversation_id = c.conversation_id AND r.id = c.id
    UNION ALL
    SELECT r.*, 'orphan_tool_result' AS finding
    FROM results AS r
    ANTI JOIN calls AS c ON c.conversation_id = r.conversation_id AND c.id = r.id
),

-- the example is the first orphan seen: lowest position, then request_id, then id
ranked_orphans AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY subject_kind, subject, finding
                           ORDER BY position ASC, request_id ASC, id ASC) AS pick
    FROM orphans
),

orphan_findings AS (
    SELECT
        subject_kind, subject, finding,
        max(request_id) FILTER (WHERE pick = 1) AS example_request_id,
        max(conversation_id) FILTER (WHERE pick = 1) AS conversation_id,
        max(position) FILTER (WHERE pick = 1) AS position,
        max(left(regexp_replace(content,
            '(sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,})',
            '[REDACTED]', 'g'), 120)) FILTER (WHERE pick = 1) AS excerpt,
        count(DISTINCT conversation_id) AS turns_affected,
        NULL::DOUBLE AS tokens_per_turn,
        count(*) || ' ids, e.g. ' || max(id) FILTER (WHERE pick = 1) AS detail
    FROM ranked_orphans
    GROUP BY subject_kind, subject, finding
),

final AS (
    SELECT
        subject_kind, subject, finding, example_request_id, conversation_id,
        position::INTEGER AS position, excerpt, turns_affected::BIGINT AS turns_affected,
        tokens_per_turn::DOUBLE AS tokens_per_turn, detail
    FROM (
        SELECT * FROM volatile
        UNION ALL SELECT * FROM dynamic
        UNION ALL SELECT * FROM rewritten
        UNION ALL SELECT * FROM orphan_findings
    )
)

SELECT * FROM final
