-- name: conversations
-- inputs: requests, request_prefix, prefix_reuse
-- output: one row per request with its conversation and turn (schemas/conversations.json).
--   Links, in order: an explicit session id (all requests with the same session_id are one
--   conversation, in arrival order); else the message history: the parent is the latest earlier
--   request of the same account whose whole history equals this request's history before its
--   last assistant reply (so a system prompt or tool list that changes every turn does not split
--   the conversation); else the prefix: the earlier request it shares the longest prefix with,
--   when that prefix reaches into the history (an edited or summarised history). A request with
--   none of these starts a new conversation (turn 1, a cold start), even when its tools or
--   system prompt are shared with other conversations.
WITH base AS (
    SELECT
        p.request_id, p.arrival_order, p.started_at, p.provider, p.model, p.account,
        r.session_id, r.agent, p.history_start, p.first_assistant, p.last_assistant,
        p.history_hash, p.before_last_reply_hash,
        coalesce(p.before_first_reply_hash, p.history_hash)             AS first_turn_key,
        x.reuse_request_id, x.shared_segments
    FROM request_prefix AS p
    JOIN requests AS r USING (request_id)
    JOIN prefix_reuse AS x USING (request_id)
),

-- sessions: the previous request of the same session is the parent
sessions AS (
    SELECT
        request_id,
        session_id                                                      AS conversation_id,
        lag(request_id) OVER (PARTITION BY session_id ORDER BY arrival_order) AS parent_request_id,
        'session_id'                                                    AS link_method
    FROM base
    WHERE session_id IS NOT NULL
),

lineage_candidates AS (
    SELECT * FROM base WHERE session_id IS NULL
),

probes AS (
    SELECT request_id, account, arrival_order, before_last_reply_hash AS probe
    FROM lineage_candidates
    WHERE last_assistant > history_start AND before_last_reply_hash IS NOT NULL
),

-- the latest earlier request whose whole history is this one's history before its last reply
history_parents AS (
    SELECT p.request_id, e.request_id AS parent_request_id
    FROM probes AS p
    ASOF JOIN lineage_candidates AS e
      ON e.account IS NOT DISTINCT FROM p.account
     AND e.history_hash = p.probe
     AND p.arrival_order > e.arrival_order
),

-- a retry: the latest earlier request with exactly the same history (e.g. after an error)
retry_parents AS (
    SELECT p.request_id, e.request_id AS parent_request_id
    FROM lineage_candidates AS p
    ASOF JOIN lineage_candidates AS e
      ON e.account IS NOT DISTINCT FROM p.account
     AND e.history_hash = p.history_hash
     AND p.arrival_order > e.arrival_order
),

linked AS (
    SELECT
        c.*,
        coalesce(h.parent_request_id, t.parent_request_id)              AS history_parent,
        -- fallback: the longest shared prefix reaches into the history
        CASE WHEN h.parent_request_id IS NULL AND t.parent_request_id IS NULL
              AND c.shared_segments > c.history_start
             THEN c.reuse_request_id END                                AS prefix_parent
    FROM lineage_candidates AS c
    LEFT JOIN history_parents AS h USING (request_id)
    LEFT JOIN retry_parents AS t USING (request_id)
),

-- a lineage starts at a request without a history parent; every later request of the lineage
-- has the same first-turn history, so it belongs to the latest such start at or before it
roots AS (
    SELECT request_id AS root_id, account, first_turn_key, arrival_order, prefix_parent
    FROM linked
    WHERE history_parent IS NULL
),

rooted AS (
    SELECT l.*, r.root_id, r.prefix_parent AS root_prefix_parent
    FROM linked AS l
    ASOF LEFT JOIN roots AS r
      ON r.account IS NOT DISTINCT FROM l.account
     AND r.first_turn_key = l.first_turn_key
     AND l.arrival_order >= r.arrival_order
),

-- one level of prefix links: a lineage whose start continues another (edited history) joins
-- that one's conversation
lineages AS (
    SELECT
        l.request_id,
        coalesce(s.conversation_id, pr.root_id, l.root_id, l.request_id) AS conversation_id,
        coalesce(l.history_parent, l.prefix_parent)                     AS parent_request_id,
        CASE WHEN l.history_parent IS NOT NULL THEN 'history'
             WHEN l.prefix_parent IS NOT NULL THEN 'prefix'
             ELSE 'new' END                                             AS link_method
    FROM rooted AS l
    LEFT JOIN rooted AS pr ON pr.request_id = l.root_prefix_parent
    LEFT JOIN sessions AS s ON s.request_id = l.root_prefix_parent
),

linked_all AS (
    SELECT * FROM sessions
    UNION ALL
    SELECT * FROM lineages
),

final AS (
    SELECT
        b.request_id,
        l.conversation_id,
        row_number() OVER (PARTITION BY l.conversation_id ORDER BY b.arrival_order)::INTEGER
                                                                        AS turn,
        l.parent_request_id,
        CASE WHEN l.parent_request_id IS NULL THEN 'new' ELSE l.link_method END AS link_method,
        b.session_id, b.agent, b.account, b.provider, b.model, b.started_at
    FROM base AS b
    JOIN linked_all AS l USING (request_id)
)

SELECT * FROM final
