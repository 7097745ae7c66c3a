-- name: conversation_links
-- inputs: requests, request_prefix, cache_rule_match, conversation_seed
-- output: one row per request with its conversation and turn, and how it was linked: the
--   columns of view conversations, then the keys and links of every step below
--   (schemas/conversation_links.json). `build` stores these rows by day, so that a later build
--   can link the requests of new days to the earlier ones without linking those again.
--   Links, in order:
--   1. An explicit session id: all requests with the same session_id are one conversation, in
--      arrival order. The parent is the latest earlier request of the session the provider
--      processed (request_prefix.writes_cache: a 2xx response), else the one just before: a
--      refused request left no cache entry, so it is not the turn the next one is compared
--      with while a processed earlier turn exists. A stream cut after it began did write the
--      cache and stays the parent (its loss may then be unknown).
--   2. Else the message history, within one cache scope (same request_prefix.cache_scope and
--      provider: the account, or without one what the capture shows belongs together; a model
--      switch continues the conversation): the parent is the latest earlier request whose
--      whole history equals this request's history before its last assistant reply (so a
--      system prompt or tool list that changes every turn does not split the conversation).
--      When that history is only the opening (the parent's history has no reply yet), an
--      opening message alone does not tell two agents apart ("Start the task."), so the
--      parent must also have the same system prompt or the same tool set; failing both, the
--      same tool set (or none on either side) and be within the parent's cache lifetime.
--   3. Else a retry: the latest earlier identical request (same model, system prompt, tools
--      and history) within the cache lifetime of the rule (its lookback where no lifetime is
--      published), e.g. after an error. A re-send of a processed request, however it was
--      linked (a session, or the history of a later turn sent twice), is link_method
--      `resend`: its parent is the request it repeats, in its own conversation, and it is no
--      cache break. A re-send of a refused request is the turn itself. The model is the one
--      that served the request (request_prefix.model): a refused request, whose error body
--      names no model, has the model its name was answered with, so a 429 on gpt-4.1 and its
--      retry answered as gpt-4.1-2025-04-14 are the same request.
--   4. Else the prefix: the earlier request it shares the longest prefix with, when that
--      prefix reaches into the history (an edited or summarised history, or a fork: the same
--      history with another last message, as parallel requests send).
--   A request with none of these starts a new conversation (turn 1, a cold start), even when
--   its tools or system prompt are shared with other conversations.
--   Without recursion, the conversation of a later turn is found through its lineage's second
--   turn: every later turn shares the first exchange (the history through the first reply and
--   the segment after it) with the turn-2 request, whose parent is the opening. Two lineages
--   interleaved with the same opening, the same first reply and the same next message are
--   indistinguishable and join the later one.
--   Every step below keys requests by their arrival order and compares scopes, sessions and
--   models by 64-bit hashes, as the prompt fingerprints already are: strings are read only by
--   the first and the last step (on 10M requests, string keys made the intermediate tables
--   too large for a build's memory cap and it spilled).
-- Seeded: every step below looks back in arrival order only, so the links of a request never
-- depend on a later one. `conversation_seed` holds stored rows of this view for earlier
-- requests (empty, except when `build` computes only the days from the first one an ingest
-- changed, pipeline/conversation_days.py): each step that looks back at earlier requests
-- reads, besides the requests computed, the seed rows with the keys it looks for, as they were
-- linked then. A seeded run gives the rows a run over the whole history gives.
-- request_prefix is read once (materialised): without a build it is a view computed on the
-- fly, and each further reading would compute it again.
WITH prefix AS MATERIALIZED (
    SELECT
        arrival_order, request_id, reuse_arrival_order, started_at, provider, model, account,
        cache_scope, history_start, first_assistant, last_assistant, history_hash,
        before_last_reply_hash, before_first_reply_hash, first_exchange_hash, system_hash,
        tools_hash, tools_set_hash, writes_cache, shared_segments
    FROM request_prefix
),

base AS (
    SELECT
        p.arrival_order, p.started_at,
        -- the cache scope and its provider as one number; without a scope, NULL matches nothing
        CASE WHEN p.cache_scope IS NOT NULL THEN hash(p.provider, p.cache_scope) END
                                                                        AS scope_hash,
        CASE WHEN r.session_id IS NOT NULL THEN hash(r.session_id) END AS session_hash,
        -- what makes two requests the same prompt, besides the history: model, session (or none
        -- on both), system prompt and tools
        hash(p.model, r.session_id, p.system_hash, p.tools_hash)       AS same_prompt_hash,
        p.history_start, p.first_assistant, p.last_assistant,
        p.history_hash, p.before_last_reply_hash, p.first_exchange_hash,
        p.system_hash, p.tools_hash, p.tools_set_hash,
        coalesce(p.before_first_reply_hash, p.history_hash)             AS first_turn_hash,
        p.writes_cache                                                  AS processed,
        -- how long after it a continuation or a retry still counts as one: the rule's cache
        -- lifetime (its lookback where none is published; a day without any rule)
        coalesce(m.lifetime_s, m.lookback_s, 86400)                     AS link_window_s,
        p.reuse_arrival_order                                           AS reuse_order,
        p.shared_segments
    FROM prefix AS p
    JOIN requests AS r USING (request_id)
    LEFT JOIN cache_rule_match AS m
      ON m.provider IS NOT DISTINCT FROM r.provider
     AND m.model IS NOT DISTINCT FROM r.model
     AND m.day = r.day
),

-- sessions: the latest earlier processed request of the session is the parent, else the one
-- just before
session_rows AS (
    SELECT arrival_order, session_hash, processed, true AS computed
    FROM base
    WHERE session_hash IS NOT NULL
    UNION ALL
    SELECT arrival_order, session_hash, processed, false
    FROM conversation_seed
    WHERE session_hash IN (SELECT session_hash FROM base)
),

session_order AS (
    SELECT
        arrival_order, session_hash, computed,
        lag(arrival_order) OVER (PARTITION BY session_hash ORDER BY arrival_order) AS previous_order,
        max(CASE WHEN processed THEN arrival_order END) OVER (
            PARTITION BY session_hash ORDER BY arrival_order
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        )                                                               AS processed_order
    FROM session_rows
),

-- a conversation is named by a request: a session's own (its session id names it) or its
-- lineage's first (its request id does)
sessions AS (
    SELECT
        arrival_order,
        arrival_order                                                   AS conversation_ref,
        session_hash,
        NULL::BIGINT                                                    AS root_order,
        coalesce(processed_order, previous_order)                       AS parent_order,
        'session_id'                                                    AS link_method
    FROM session_order
    WHERE computed
),

lineage_candidates AS (
    SELECT * FROM base WHERE session_hash IS NULL
),

probes AS (
    SELECT
        arrival_order, scope_hash, started_at, system_hash, tools_set_hash,
        before_last_reply_hash                                          AS probe,
        -- the history before the last reply holds no reply: it is the opening only
        first_assistant = last_assistant                                AS opening_probe
    FROM lineage_candidates
    WHERE last_assistant > history_start AND before_last_reply_hash IS NOT NULL
),

-- the requests a probe may find: those computed, and the seed's with a probed history
history_candidates AS (
    SELECT
        arrival_order, scope_hash, history_hash, system_hash, tools_set_hash, started_at,
        link_window_s
    FROM lineage_candidates
    UNION ALL
    SELECT
        arrival_order, scope_hash, history_hash, system_hash, tools_set_hash, started_at,
        link_window_s
    FROM conversation_seed
    WHERE session_hash IS NULL
      AND hash(scope_hash, history_hash) IN (SELECT hash(scope_hash, probe) FROM probes)
),

-- the latest earlier request whose whole history is this one's history before its last reply
history_any AS (
    SELECT
        p.arrival_order, e.arrival_order AS parent_order, e.started_at AS parent_started_at,
        e.tools_set_hash AS parent_tools_set_hash, e.link_window_s
    FROM probes AS p
    ASOF JOIN history_candidates AS e
      ON e.scope_hash = p.scope_hash
     AND e.history_hash = p.probe
     AND p.arrival_order > e.arrival_order
),

opening_probes AS (
    SELECT * FROM probes WHERE opening_probe
),

-- for an opening: the same, with the same system prompt ...
history_same_system AS (
    SELECT p.arrival_order, e.arrival_order AS parent_order
    FROM opening_probes AS p
    ASOF JOIN history_candidates AS e
      ON e.scope_hash = p.scope_hash
     AND e.history_hash = p.probe
     AND e.system_hash IS NOT DISTINCT FROM p.system_hash
     AND p.arrival_order > e.arrival_order
),

-- ... or the same tool set (in any order: a reordered tool list is still the same agent)
history_same_tools AS (
    SELECT p.arrival_order, e.arrival_order AS parent_order
    FROM opening_probes AS p
    ASOF JOIN history_candidates AS e
      ON e.scope_hash = p.scope_hash
     AND e.history_hash = p.probe
     AND e.tools_set_hash = p.tools_set_hash
     AND p.arrival_order > e.arrival_order
),

history_parents AS (
    SELECT
        p.arrival_order,
        CASE
            WHEN NOT p.opening_probe THEN a.parent_order
            WHEN s.parent_order IS NOT NULL OR t.parent_order IS NOT NULL THEN
                CASE WHEN coalesce(t.parent_order > s.parent_order, s.parent_order IS NULL)
                     THEN t.parent_order ELSE s.parent_order END
            -- neither: the latest opening, if it has the same tools (or none) and is recent
            WHEN a.parent_tools_set_hash IS NOT DISTINCT FROM p.tools_set_hash
                 AND date_diff('millisecond', a.parent_started_at, p.started_at)
                     <= a.link_window_s * 1000
                THEN a.parent_order
        END                                                             AS parent_order,
        p.opening_probe
    FROM probes AS p
    LEFT JOIN history_any AS a USING (arrival_order)
    LEFT JOIN history_same_system AS s USING (arrival_order)
    LEFT JOIN history_same_tools AS t USING (arrival_order)
),

-- the latest earlier identical request (same model, system prompt, tools and history) of the
-- same session (or none on both), if recent: a re-send of the same prompt (after an error, a
-- timeout, or a client sending it twice)
-- a re-send repeats a request within that request's link window, which no rule makes longer
-- than its lifetime or lookback (a day where no rule applies): a seed row older than the
-- longest of them before the first request computed cannot be one, nor can any row before it.
-- A bound on started_at also lets the scan of the seed skip those days
resend_reach AS (
    SELECT
        (SELECT min(started_at) FROM base)
        - greatest(
            (SELECT max(coalesce(lifetime_s, lookback_s, 86400)) FROM cache_rule_match), 86400
        ) * INTERVAL 1 SECOND                                           AS earliest
),

identical_rows AS (
    SELECT
        arrival_order, started_at, session_hash, scope_hash, same_prompt_hash, history_hash,
        link_window_s, processed, true AS computed
    FROM base
    WHERE scope_hash IS NOT NULL AND history_hash IS NOT NULL
    UNION ALL
    SELECT
        arrival_order, started_at, session_hash, scope_hash, same_prompt_hash, history_hash,
        link_window_s, processed, false
    FROM conversation_seed
    WHERE scope_hash IS NOT NULL AND history_hash IS NOT NULL
      AND started_at >= (SELECT earliest FROM resend_reach)
      AND hash(scope_hash, same_prompt_hash, history_hash)
          IN (SELECT hash(scope_hash, same_prompt_hash, history_hash) FROM base)
),

identical_any AS (
    SELECT
        arrival_order, started_at, session_hash, computed,
        lag(arrival_order) OVER same_prompt                             AS parent_order,
        lag(started_at) OVER same_prompt                                AS parent_started_at,
        lag(link_window_s) OVER same_prompt                             AS link_window_s,
        lag(processed) OVER same_prompt                                 AS parent_processed
    FROM identical_rows
    WINDOW same_prompt AS (
        PARTITION BY scope_hash, same_prompt_hash, history_hash ORDER BY arrival_order
    )
),

resends AS (
    SELECT arrival_order, session_hash, parent_order, parent_processed
    FROM identical_any
    WHERE computed
      AND date_diff('millisecond', parent_started_at, started_at) <= link_window_s * 1000
),

-- without a session: a retry links to the request it repeats
retry_parents AS (
    SELECT arrival_order, parent_order FROM resends WHERE session_hash IS NULL
),

linked AS (
    SELECT
        c.*,
        coalesce(h.parent_order, t.parent_order)                        AS history_parent,
        -- the turn-2 request of a lineage: linked by its history to an opening
        coalesce(h.opening_probe AND h.parent_order IS NOT NULL, false) AS second_turn,
        h.parent_order IS NULL AND t.parent_order IS NOT NULL           AS retried,
        -- fallback: the longest shared prefix reaches into the history
        CASE WHEN h.parent_order IS NULL AND t.parent_order IS NULL
              AND c.shared_segments > c.history_start
             THEN c.reuse_order END                                     AS prefix_parent
    FROM lineage_candidates AS c
    LEFT JOIN history_parents AS h USING (arrival_order)
    LEFT JOIN retry_parents AS t USING (arrival_order)
),

-- a fork: prefix-linked with the same opening as its prefix parent (the same history, another
-- last message); it stays in that lineage rather than starting one
shaped AS (
    SELECT
        l.*,
        coalesce(l.prefix_parent IS NOT NULL AND pp.first_turn_hash = l.first_turn_hash, false)
                                                                        AS fork
    FROM linked AS l
    LEFT JOIN (
        SELECT arrival_order, first_turn_hash FROM base
        UNION ALL
        SELECT arrival_order, first_turn_hash FROM conversation_seed
        WHERE arrival_order IN (SELECT prefix_parent FROM linked)
    ) AS pp ON pp.arrival_order = l.prefix_parent
),

-- a lineage starts at a request without a history parent that is not a fork
roots AS (
    SELECT
        arrival_order AS root_id, scope_hash, same_prompt_hash, history_hash, first_turn_hash,
        arrival_order, prefix_parent
    FROM shaped
    WHERE history_parent IS NULL AND NOT fork
),

seed_roots AS (
    SELECT
        arrival_order AS root_id, scope_hash, same_prompt_hash, history_hash, first_turn_hash,
        arrival_order, prefix_parent
    FROM conversation_seed
    WHERE session_hash IS NULL AND history_parent IS NULL AND NOT fork
),

-- a retried opening belongs to the first of its identical requests: the latest root that is
-- identical to it at or before it
retried_openings AS (
    SELECT * FROM shaped WHERE retried
),

retry_roots AS (
    SELECT l.arrival_order, r.root_id
    FROM retried_openings AS l
    ASOF JOIN (
        SELECT * FROM roots
        UNION ALL
        SELECT * FROM seed_roots
        WHERE hash(scope_hash, same_prompt_hash, history_hash) IN (
            SELECT hash(scope_hash, same_prompt_hash, history_hash) FROM retried_openings)
    ) AS r
      ON r.scope_hash = l.scope_hash
     AND r.same_prompt_hash = l.same_prompt_hash
     AND r.history_hash = l.history_hash
     AND l.arrival_order >= r.arrival_order
),

-- the opening of each later turn: the parent of the latest turn-2 request with the same first
-- exchange at or before it (a turn-2 request finds itself)
later_turns AS (
    SELECT * FROM shaped WHERE history_parent IS NOT NULL AND NOT retried
),

second_turns AS (
    SELECT arrival_order, scope_hash, first_exchange_hash, history_parent
    FROM shaped
    WHERE second_turn
    UNION ALL
    SELECT arrival_order, scope_hash, first_exchange_hash, history_parent
    FROM conversation_seed
    WHERE second_turn
      AND hash(scope_hash, first_exchange_hash)
          IN (SELECT hash(scope_hash, first_exchange_hash) FROM later_turns)
),

openings AS (
    SELECT l.arrival_order, a.history_parent AS opening_id
    FROM later_turns AS l
    ASOF JOIN second_turns AS a
      ON a.scope_hash = l.scope_hash
     AND a.first_exchange_hash = l.first_exchange_hash
     AND l.arrival_order >= a.arrival_order
),

-- the opening's own lineage start: itself, or the start of the retries it is one of
opening_roots AS (
    SELECT o.arrival_order, coalesce(r.root_id, rr.root_id) AS root_id
    FROM openings AS o
    LEFT JOIN (
        SELECT root_id FROM roots
        UNION ALL
        SELECT root_id FROM seed_roots WHERE root_id IN (SELECT opening_id FROM openings)
    ) AS r ON r.root_id = o.opening_id
    LEFT JOIN (
        SELECT arrival_order, root_id FROM retry_roots
        UNION ALL
        SELECT arrival_order, retry_root FROM conversation_seed
        WHERE retry_root IS NOT NULL AND arrival_order IN (SELECT opening_id FROM openings)
    ) AS rr ON rr.arrival_order = o.opening_id
),

-- otherwise (a fork, or a lineage whose second turn was not seen): the latest root with the
-- same first-turn history at or before it
unplaced AS (
    SELECT s.*
    FROM shaped AS s
    LEFT JOIN retry_roots AS rr USING (arrival_order)
    LEFT JOIN opening_roots AS o USING (arrival_order)
    WHERE (s.history_parent IS NOT NULL OR s.fork)
      AND rr.root_id IS NULL AND o.root_id IS NULL
),

by_first_turn AS (
    SELECT l.arrival_order, r.root_id
    FROM unplaced AS l
    ASOF JOIN (
        SELECT * FROM roots
        UNION ALL
        SELECT * FROM seed_roots
        WHERE hash(scope_hash, first_turn_hash)
              IN (SELECT hash(scope_hash, first_turn_hash) FROM unplaced)
    ) AS r
      ON r.scope_hash = l.scope_hash
     AND r.first_turn_hash = l.first_turn_hash
     AND l.arrival_order >= r.arrival_order
),

rooted AS (
    SELECT
        s.*,
        CASE WHEN s.history_parent IS NULL AND NOT s.fork THEN s.arrival_order
             ELSE coalesce(rr.root_id, o.root_id, f.root_id) END        AS root_id,
        rr.root_id                                                      AS retry_root
    FROM shaped AS s
    LEFT JOIN retry_roots AS rr USING (arrival_order)
    LEFT JOIN opening_roots AS o USING (arrival_order)
    LEFT JOIN by_first_turn AS f USING (arrival_order)
),

-- the lineage rows the links below look up: those computed and the seed's. Of the seed only
-- the rows a link names, in two steps: the root and the parent of each row computed, then
-- what those rows name (a root's prefix parent, a parent's own parent). The seed read whole
-- was joined three times, the most costly part of a seeded run.
named_first AS (
    SELECT root_id AS arrival_order FROM rooted
    UNION
    SELECT coalesce(history_parent, prefix_parent) FROM rooted
),

rooted_near AS (
    SELECT arrival_order, root_id, prefix_parent, history_parent, processed FROM rooted
    UNION ALL
    SELECT arrival_order, root_id, prefix_parent, history_parent, processed
    FROM conversation_seed
    WHERE session_hash IS NULL AND arrival_order IN (SELECT arrival_order FROM named_first)
),

named_next AS (
    SELECT prefix_parent AS arrival_order FROM rooted_near
    UNION
    SELECT coalesce(history_parent, prefix_parent) FROM rooted_near
),

-- (UNION: a seed row named at both steps is one row)
rooted_all AS (
    SELECT * FROM rooted_near
    UNION
    SELECT arrival_order, root_id, prefix_parent, history_parent, processed
    FROM conversation_seed
    WHERE session_hash IS NULL AND arrival_order IN (SELECT arrival_order FROM named_next)
),

sessions_all AS (
    SELECT arrival_order, conversation_ref, session_hash FROM sessions
    UNION ALL
    SELECT arrival_order, conversation_ref, session_hash
    FROM conversation_seed
    WHERE session_hash IS NOT NULL AND arrival_order IN (SELECT arrival_order FROM named_next)
),

base_all AS (
    SELECT arrival_order, processed FROM base
    UNION ALL
    SELECT arrival_order, processed FROM conversation_seed
    WHERE arrival_order IN (SELECT arrival_order FROM named_next)
),

-- one level of prefix links: a lineage whose start continues another (edited history) joins
-- that one's conversation. A refused parent gives way to its own parent when the provider
-- processed that one, as in sessions (one step)
lineages AS (
    SELECT
        l.arrival_order,
        coalesce(s.conversation_ref, pr.root_id, l.root_id, l.arrival_order) AS conversation_ref,
        s.session_hash,
        CASE WHEN s.session_hash IS NULL
             THEN coalesce(pr.root_id, l.root_id, l.arrival_order) END AS root_order,
        CASE WHEN NOT up.processed AND up_parent.processed THEN up_parent.arrival_order
             ELSE coalesce(l.history_parent, l.prefix_parent) END      AS parent_order,
        CASE WHEN l.history_parent IS NOT NULL THEN 'history'
             WHEN l.prefix_parent IS NOT NULL THEN 'prefix'
             ELSE 'new' END                                             AS link_method
    FROM rooted AS l
    LEFT JOIN rooted_all AS root ON root.arrival_order = l.root_id
    LEFT JOIN rooted_all AS pr ON pr.arrival_order = root.prefix_parent
    LEFT JOIN sessions_all AS s ON s.arrival_order = root.prefix_parent
    LEFT JOIN rooted_all AS up ON up.arrival_order = coalesce(l.history_parent, l.prefix_parent)
    LEFT JOIN base_all AS up_parent
      ON up_parent.arrival_order = coalesce(up.history_parent, up.prefix_parent)
),

linked_all AS (
    SELECT * FROM sessions
    UNION ALL
    SELECT * FROM lineages
),

-- a re-send of a processed request of its own conversation is that request again, whatever
-- linked it: its parent is the request it repeats, and it is no new turn of the prompt (no
-- cache break). One repeating a refused request is the turn itself: it keeps its parent
resent AS (
    SELECT l.arrival_order, r.parent_order AS resent_order
    FROM linked_all AS l
    JOIN resends AS r USING (arrival_order)
    JOIN (
        SELECT arrival_order, session_hash, root_order FROM linked_all
        UNION ALL
        SELECT arrival_order, turn_session_hash, root_order FROM conversation_seed
        WHERE arrival_order IN (SELECT parent_order FROM resends)
    ) AS o ON o.arrival_order = r.parent_order
    WHERE o.session_hash IS NOT DISTINCT FROM l.session_hash
      AND o.root_order IS NOT DISTINCT FROM l.root_order
      AND r.parent_processed
),

-- the turns of each conversation before the requests computed: the seed's
earlier_turns AS (
    SELECT turn_session_hash AS session_hash, root_order, count(*) AS turns
    FROM conversation_seed
    WHERE hash(turn_session_hash, root_order)
          IN (SELECT hash(session_hash, root_order) FROM linked_all)
    GROUP BY turn_session_hash, root_order
),

counted AS (
    SELECT
        l.*,
        row_number() OVER (PARTITION BY l.session_hash, l.root_order ORDER BY l.arrival_order)
                                                                        AS turn_here
    FROM linked_all AS l
),

numbered AS (
    SELECT
        l.arrival_order, l.conversation_ref, l.session_hash, l.root_order,
        (coalesce(e.turns, 0) + l.turn_here)::INTEGER                   AS turn,
        coalesce(x.resent_order, l.parent_order)                        AS parent_order,
        CASE WHEN x.resent_order IS NOT NULL THEN 'resend'
             WHEN l.parent_order IS NULL THEN 'new'
             ELSE l.link_method END                                     AS link_method
    FROM counted AS l
    LEFT JOIN resent AS x USING (arrival_order)
    LEFT JOIN earlier_turns AS e
      ON e.session_hash IS NOT DISTINCT FROM l.session_hash
     AND e.root_order IS NOT DISTINCT FROM l.root_order
),

-- the names back: request ids, session ids and the columns shown
named AS (
    SELECT
        p.arrival_order, p.request_id, r.session_id, r.agent, p.account, p.provider, p.model,
        p.started_at
    FROM prefix AS p
    JOIN requests AS r USING (request_id)
),

-- a conversation or a parent named by an earlier request: the seed's names
named_all AS (
    SELECT arrival_order, request_id, session_id FROM named
    UNION ALL
    SELECT arrival_order, request_id, session_id FROM conversation_seed
    WHERE arrival_order IN (
        SELECT conversation_ref FROM numbered UNION SELECT parent_order FROM numbered)
),

final AS (
    SELECT
        b.request_id,
        coalesce(c.session_id, c.request_id)                            AS conversation_id,
        n.turn,
        parent.request_id                                               AS parent_request_id,
        n.link_method,
        b.session_id, b.agent, b.account, b.provider, b.model, b.started_at,
        -- what a later seeded run looks up of this request (conversation_seed)
        n.arrival_order, k.scope_hash, k.session_hash, k.same_prompt_hash, k.history_hash,
        k.first_turn_hash, k.first_exchange_hash, k.system_hash, k.tools_set_hash,
        k.link_window_s, k.processed, o.history_parent, o.prefix_parent, o.fork,
        o.second_turn, o.retry_root, o.root_id, n.session_hash AS turn_session_hash, n.root_order,
        n.conversation_ref,
        -- the parent's arrival order, which holds its day: where a build computing the breaks
        -- of some days starts reading (pipeline/break_days.py)
        n.parent_order
    FROM numbered AS n
    JOIN named AS b ON b.arrival_order = n.arrival_order
    JOIN base AS k ON k.arrival_order = n.arrival_order
    LEFT JOIN rooted AS o ON o.arrival_order = n.arrival_order
    JOIN named_all AS c ON c.arrival_order = n.conversation_ref
    LEFT JOIN named_all AS parent ON parent.arrival_order = n.parent_order
)

SELECT * FROM final
