-- name: finding_breaks
-- inputs: break_costs, cache_breaks, conversations
-- output: one row per cache break that is a finding (every break but a cold start, which loses
--   nothing), with the keys a finding groups breaks by -- scope (the agent, else the
--   conversation when the agent is unknown: prefix_hygiene's subjects), cause, where (the changed
--   segment's kind, role and position), change class, currency of the money -- its loss in
--   tokens and money (NULL when unknown), its excerpts, and the fix in plain words chosen from
--   its cause and change class. The one definition of a finding: findings groups these rows over
--   all traffic, report_findings week by week.
WITH subjects AS (
    SELECT
        request_id,
        CASE WHEN agent IS NULL THEN 'conversation' ELSE 'agent' END    AS scope_kind,
        coalesce(agent, conversation_id)                                AS scope
    FROM conversations
),

final AS (
    SELECT
        s.scope_kind, s.scope, k.cause, b.changed_kind, b.changed_role, b.changed_position,
        b.change_class, k.currency, k.request_id, k.conversation_id, k.turn, k.started_at,
        k.tokens_lost, k.lost_cost, k.lost_cost_unpriced_reason, b.excerpt, b.parent_excerpt,
        b.gap_s,
        CASE
            WHEN k.cause = 'provider_miss'
                THEN 'the provider served less than its own rules allow: nothing to fix on your side'
            WHEN k.cause = 'expired'
                THEN 'send within the cache lifetime, or ask for the longer retention where the provider offers it'
            WHEN k.cause = 'model_changed'
                THEN 'keep one model per conversation: a cache belongs to one model'
            WHEN k.cause = 'below_minimum'
                THEN 'the prefix is under the provider''s minimum: nothing is cached until it grows'
            WHEN k.cause = 'tools_changed' AND b.change_class = 'reordered'
                THEN 'keep the tool order stable (sort the tools by name)'
            WHEN k.cause = 'tools_changed'
                THEN 'keep the tool definitions fixed between turns'
            -- the same text in another key order or spacing: nobody edited it, a framework
            -- parsed and serialised it again (typically tool-call arguments)
            WHEN k.cause = 'history_rewritten' AND b.change_class = 'reordered'
                THEN 'send earlier messages back exactly as they were (tool-call arguments in the key order they came with)'
            WHEN k.cause = 'history_rewritten' AND b.change_class = 'whitespace'
                THEN 'send earlier messages back exactly as they were (the same spacing and line breaks)'
            WHEN k.cause = 'history_rewritten'
                THEN 'append to the history instead of editing or dropping earlier messages'
            WHEN b.change_class IN ('timestamp', 'uuid', 'counter')
                THEN 'move the ' || b.change_class || ' after the history'
            ELSE 'keep the system prompt fixed; put what changes after the history'
        END                                                             AS fix
    FROM break_costs AS k
    JOIN cache_breaks AS b USING (request_id)
    JOIN subjects AS s USING (request_id)
    WHERE k.cause <> 'cold_start'
)

SELECT * FROM final
