-- name: request_prefix
-- inputs: prefix_requests, prefix_segments, cache_rules
-- output: one row per request with everything the prefix views need from its segments (the
--   heavy step; materialised by `cacheaudit build`). One window over the segments: per (cache
--   scope, chained prefix hash), which earlier request last had the same prefix at each
--   position, and which cache entries were there when this request arrived. Sharing is
--   contiguous from position 0 because prefix hashes are chained. prefix_requests says what
--   the cache scope is and when an entry is available; prefix_segments what is compared.
--   Every window and aggregate here stays within one cache scope (the prefix fingerprint
--   includes it), so `cacheaudit build` may compute whole scopes apart and put the rows
--   together: the only step over every request, the arrival order, is taken in
--   prefix_requests.
--   The horizon: an earlier request further back than the longest lifetime or lookback any
--   cache rule allows (3 days with the shipped rules; a day at least) is not looked at, even
--   by a rule with no published lifetime (Gemini implicit, vLLM, SGLang), whose entries the
--   provider keeps until it evicts them. So a request's row depends only on the requests of
--   its scope within the horizon before it, and `cacheaudit build` computes a day from that
--   day and the horizon before it (docs/providers.md, "The horizon").
--   Cost notes (bench/views.py): the window sort is the one expensive step, so it carries only
--   narrow numeric columns and one window specification (one sort); the entry a request can
--   read is found among the four requests before it (lags, no second pass); counts, bytes and
--   the tools, system and history fingerprints come from one cheap re-scan of `seg` grouped by
--   request instead of widening that sort.
WITH req AS (
    SELECT * FROM prefix_requests
),

-- how far back a request looks (see the header), in microseconds: the longest lifetime,
-- extended lifetime or lookback of any rule, and a day (what a request no rule matches gets)
horizon AS (
    SELECT greatest(
        max(greatest(coalesce(lifetime_s, 0), coalesce(extended_lifetime_s, 0),
                     coalesce(lookback_s, 0))),
        86400
    ) * 1000000                                                         AS horizon_us
    FROM cache_rules
),

-- the segments with what their request says of the entry left at each position
seg AS NOT MATERIALIZED (
    SELECT
        q.rid_ord, q.t_us, s.position, s.bytes, s.kind_code, s.role_code, s.content_hash,
        -- the prefix within the cache scope: what the window compares
        hash(s.chain_hash, q.scope_hash)                                AS scoped_prefix_hash,
        -- when the entry this request leaves here became available; NULL: it left none
        CASE WHEN q.writes_cache THEN q.t_us + round(q.available_after_ms * 1000)::BIGINT END
                                                                        AS available_us,
        q.t_us - q.lookback_us                                          AS lookback_from_us,
        -- when the entry this request leaves at this position expires unless used again: its
        -- own TTL there, counted from when the entry became available, as the request that
        -- last used an entry sets how long it lives. NULL = never (no published lifetime)
        q.t_us + round(q.available_after_ms * 1000)::BIGINT
            + CASE WHEN s.position < q.extended_segments THEN q.extended_lifetime_us
                   ELSE q.lifetime_us END                               AS expires_us,
        s.position = q.segment_count - 1                                AS is_end,
        -- a cache_control breakpoint at this position, and one within the lookback after it
        -- (only Anthropic-style requests have breakpoints: skip the list work for the rest)
        CASE WHEN q.cache_breakpoints IS NULL THEN false
             ELSE coalesce(list_contains(q.cache_breakpoints, s.position), false) END
                                                                        AS is_breakpoint,
        CASE WHEN q.cache_breakpoints IS NULL THEN false
             ELSE len(list_filter(
                q.cache_breakpoints,
                lambda b: b >= s.position AND b <= s.position + q.breakpoint_lookback
             )) > 0 END                                                 AS breakpoint_near,
        s.position <= q.last_breakpoint                                 AS is_marked
    FROM prefix_segments AS s
    JOIN req AS q USING (request_id)
),

-- one partition and order (one sort); the frame of the last values stops before the row
windowed AS (
    SELECT
        rid_ord, position, kind_code, role_code, t_us, lookback_from_us,
        breakpoint_near,
        -- the latest earlier request in scope with the same prefix up to this position (any
        -- request, processed or not: sharing, for the lookback and for linking)
        lag(rid_ord) OVER same_prefix                                   AS prev_ord,
        lag(t_us) OVER same_prefix                                      AS prev_us,
        -- the four requests before it with this prefix: when the entry each left became
        -- available (NULL: refused, it left none) and until when it lives
        lag(available_us) OVER same_prefix                              AS available_1,
        lag(expires_us) OVER same_prefix                                AS expires_1,
        lag(available_us, 2) OVER same_prefix                           AS available_2,
        lag(t_us, 2) OVER same_prefix                                   AS t_2,
        lag(expires_us, 2) OVER same_prefix                             AS expires_2,
        lag(available_us, 3) OVER same_prefix                           AS available_3,
        lag(t_us, 3) OVER same_prefix                                   AS t_3,
        lag(expires_us, 3) OVER same_prefix                             AS expires_3,
        lag(available_us, 4) OVER same_prefix                           AS available_4,
        lag(t_us, 4) OVER same_prefix                                   AS t_4,
        lag(expires_us, 4) OVER same_prefix                             AS expires_4,
        -- the latest earlier processed request whose whole prompt ended here (a DeepSeek input
        -- unit), and the latest with a cache_control breakpoint here (an Anthropic cache
        -- entry): when its entry became available, and when it arrived (for the horizon). Both
        -- skip a refused request (it left no entry), so they describe the same request. The
        -- same partition and order as the lags, so the same sort
        last_value(CASE WHEN is_end THEN available_us END IGNORE NULLS) OVER before_prefix
                                                                        AS end_available_us,
        last_value(CASE WHEN is_end AND available_us IS NOT NULL THEN t_us END IGNORE NULLS)
            OVER before_prefix
                                                                        AS end_t_us,
        last_value(CASE WHEN is_breakpoint THEN available_us END IGNORE NULLS) OVER before_prefix
                                                                        AS breakpoint_available_us,
        last_value(CASE WHEN is_breakpoint AND available_us IS NOT NULL THEN t_us END IGNORE NULLS)
            OVER before_prefix
                                                                        AS breakpoint_t_us
    FROM seg
    WINDOW
        same_prefix AS (PARTITION BY scoped_prefix_hash ORDER BY rid_ord),
        before_prefix AS (
            PARTITION BY scoped_prefix_hash ORDER BY rid_ord
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        )
),

-- what the window found, within the horizon: an earlier request further back is not there.
-- Lag k is older than lag k - 1, so once one is past the horizon every later one is too
within_horizon AS (
    SELECT
        w.rid_ord, w.position, w.kind_code, w.role_code, w.t_us, w.lookback_from_us,
        w.breakpoint_near, w.prev_ord, w.prev_us,
        CASE WHEN w.prev_us >= w.t_us - h.horizon_us THEN w.available_1 END AS available_1,
        CASE WHEN w.t_2 >= w.t_us - h.horizon_us THEN w.available_2 END AS available_2,
        CASE WHEN w.t_3 >= w.t_us - h.horizon_us THEN w.available_3 END AS available_3,
        CASE WHEN w.t_4 >= w.t_us - h.horizon_us THEN w.available_4 END AS available_4,
        w.expires_1, w.expires_2, w.expires_3, w.expires_4,
        -- an entry whose prompt ended here (or with a breakpoint here) available before this
        -- request arrived: a later request's entry is available after it arrives, so only
        -- earlier requests count
        CASE WHEN w.end_t_us >= w.t_us - h.horizon_us THEN w.end_available_us END
                                                                        AS ended_here_us,
        CASE WHEN w.breakpoint_t_us >= w.t_us - h.horizon_us THEN w.breakpoint_available_us END
                                                                        AS breakpoint_here_us
    FROM windowed AS w
    CROSS JOIN horizon AS h
),

-- The entry a request can read at a position: the one left by the latest of the four requests
-- before it whose first byte had arrived when it arrived (that request last used the entry
-- and set its lifetime). Usually the one just before it; when that one had not answered yet
-- (parallel requests) or was refused, an older one. With more than four such requests in a
-- row an older entry is not seen: the expected read is then lower, never higher.
alive AS (
    SELECT
        *,
        -- NULL expiry: never expires (no published lifetime)
        CASE WHEN available_1 <= t_us THEN coalesce(expires_1 >= t_us, true)
             WHEN available_2 <= t_us THEN coalesce(expires_2 >= t_us, true)
             WHEN available_3 <= t_us THEN coalesce(expires_3 >= t_us, true)
             WHEN available_4 <= t_us THEN coalesce(expires_4 >= t_us, true)
             ELSE false END                                             AS is_live,
        -- two of them had answered: a prefix two processed requests shared, which DeepSeek
        -- persists as a unit (common-prefix detection; a refused request was never seen)
        coalesce((available_1 <= t_us)::INTEGER, 0) + coalesce((available_2 <= t_us)::INTEGER, 0)
            + coalesce((available_3 <= t_us)::INTEGER, 0)
            + coalesce((available_4 <= t_us)::INTEGER, 0) >= 2            AS shared_by_two
    FROM within_horizon
),

-- Ends of the shared prefixes per request. Prefix hashes are chained, so an earlier request
-- sharing position p shares every position before it: "shared within the lookback" and
-- "alive" hold for the positions up to an end and for none after it. Only the ends are found
-- here (this aggregate reads the window's output in prefix order, so each row lands on a
-- random request: few, small aggregates); counts and bytes up to them are summed below, in
-- request order.
positions AS (
    SELECT
        rid_ord,
        max(position) FILTER (WHERE prev_us >= lookback_from_us)        AS shared_end,
        arg_max(prev_ord, position) FILTER (WHERE prev_us >= lookback_from_us) AS reuse_ord,
        max(position) FILTER (WHERE is_live)                            AS live_end,
        max(position) FILTER (WHERE is_live AND ended_here_us < t_us)   AS input_unit_end,
        max(position) FILTER (WHERE is_live AND shared_by_two)          AS shared_unit_end,
        max(position) FILTER (
            WHERE is_live AND breakpoint_here_us < t_us AND breakpoint_near
        )                                                               AS breakpoint_end,
        -- the prompt's layout, needed below to hash the history
        min(position) FILTER (WHERE kind_code = 3)                      AS history_start,
        min(position) FILTER (WHERE role_code = 4)                      AS first_assistant,
        max(position) FILTER (WHERE role_code = 4)                      AS last_assistant
    FROM alive
    GROUP BY rid_ord
),

-- counts and bytes up to the ends found above, where the prompts first diverge, and the
-- history fingerprints (history = every segment from the first message on, each hashed with
-- its offset in the history)
per_request AS (
    SELECT
        f.rid_ord,
        count(*) FILTER (WHERE f.position <= a.shared_end)              AS shared_segments,
        sum(f.bytes) FILTER (WHERE f.position <= a.shared_end)          AS shared_bytes,
        count(*) FILTER (WHERE f.position <= a.live_end)                AS live_segments,
        sum(f.bytes) FILTER (WHERE f.position <= a.live_end)            AS live_bytes,
        min(f.position) FILTER (WHERE NOT coalesce(f.position <= a.shared_end, false))
                                                                        AS first_diverging_position,
        arg_min(f.kind_code, f.position) FILTER (WHERE NOT coalesce(f.position <= a.shared_end, false))
                                                                        AS diverging_kind_code,
        arg_min(f.role_code, f.position) FILTER (WHERE NOT coalesce(f.position <= a.shared_end, false))
                                                                        AS diverging_role_code,
        -- DeepSeek units: an earlier whole input, that input plus its reply (the assistant
        -- message right after it), or a prefix two earlier requests shared
        greatest(
            sum(f.bytes) FILTER (WHERE f.position <= a.input_unit_end),
            sum(f.bytes) FILTER (WHERE f.position <= a.input_unit_end + 1)
                + CASE WHEN bool_or(f.position = a.input_unit_end + 1 AND f.role_code = 4)
                       THEN 0 END,
            sum(f.bytes) FILTER (WHERE f.position <= a.shared_unit_end)
        )                                                               AS unit_bytes,
        sum(f.bytes) FILTER (WHERE f.position <= a.breakpoint_end)       AS breakpoint_bytes,
        sum(f.bytes) FILTER (WHERE f.is_marked)                         AS marked_bytes,
        count(*) FILTER (WHERE f.kind_code = 3)                         AS history_segments,
        bit_xor(hash(xor(f.content_hash, f.position::UBIGINT))) FILTER (WHERE f.kind_code = 0)
                                                                        AS tools_hash,
        bit_xor(f.content_hash) FILTER (WHERE f.kind_code = 0)          AS tools_set_hash,
        -- the system layer: output schema, system prompt and an explicit cache (cachedContent)
        bit_xor(hash(xor(f.content_hash, f.position::UBIGINT))) FILTER (WHERE f.kind_code IN (1, 2, 4))
                                                                        AS system_hash,
        sum(f.bytes) FILTER (WHERE f.kind_code = 0)                     AS tools_bytes,
        -- a Gemini explicit cache (cachedContent): made outside the captured traffic
        bool_or(f.kind_code = 4)                                        AS explicit_cache,
        bit_xor(hash(xor(f.content_hash, greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start)                AS history_hash,
        bit_xor(hash(xor(f.content_hash, greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start AND f.position < a.last_assistant)
                                                                        AS before_last_reply_hash,
        bit_xor(hash(xor(f.content_hash, greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start AND f.position < a.first_assistant)
                                                                        AS before_first_reply_hash,
        -- the first exchange: the history through the first reply and the segment after it,
        -- shared by every later turn of the lineage (conversations.sql)
        bit_xor(hash(xor(f.content_hash, greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start AND f.position <= a.first_assistant + 1)
                                                                        AS first_exchange_hash
    FROM seg AS f
    JOIN positions AS a USING (rid_ord)
    GROUP BY f.rid_ord
),

final AS (
    SELECT
        q.request_id,
        q.rid_ord::BIGINT                                               AS arrival_order,
        q.started_at, q.provider, q.model, q.account, q.cache_scope, q.segment_count,
        q.prompt_bytes, q.writes_cache,
        CASE WHEN q.writes_cache THEN q.available_after_ms END::DOUBLE  AS available_after_ms,
        coalesce(b.shared_segments, 0)::INTEGER                         AS shared_segments,
        coalesce(b.shared_bytes, 0)::BIGINT                             AS shared_bytes,
        reuse.request_id                                                AS reuse_request_id,
        reuse.started_at                                                AS reuse_started_at,
        reuse.rid_ord::BIGINT                                           AS reuse_arrival_order,
        coalesce(b.live_segments, 0)::INTEGER                           AS live_segments,
        coalesce(b.live_bytes, 0)::BIGINT                               AS live_bytes,
        coalesce(least(q.extended_segments, q.segment_count), 0)::INTEGER AS extended_segments,
        b.first_diverging_position::INTEGER                             AS first_diverging_position,
        CASE b.diverging_kind_code WHEN 0 THEN 'tool' WHEN 1 THEN 'schema' WHEN 2 THEN 'system'
             WHEN 3 THEN 'message' WHEN 4 THEN 'cached_content' END     AS diverging_kind,
        CASE b.diverging_role_code WHEN 1 THEN 'system' WHEN 2 THEN 'developer'
             WHEN 3 THEN 'user' WHEN 4 THEN 'assistant' WHEN 5 THEN 'tool' END AS diverging_role,
        b.unit_bytes::BIGINT                                            AS unit_bytes,
        b.breakpoint_bytes::BIGINT                                      AS breakpoint_bytes,
        b.marked_bytes::BIGINT                                          AS marked_bytes,
        p.history_start::INTEGER                                        AS history_start,
        p.first_assistant::INTEGER                                      AS first_assistant,
        p.last_assistant::INTEGER                                       AS last_assistant,
        coalesce(b.history_segments, 0)::INTEGER                        AS history_segments,
        (b.history_hash >> 1)::BIGINT                                   AS history_hash,
        (b.before_last_reply_hash >> 1)::BIGINT                         AS before_last_reply_hash,
        (b.before_first_reply_hash >> 1)::BIGINT                        AS before_first_reply_hash,
        (b.first_exchange_hash >> 1)::BIGINT                            AS first_exchange_hash,
        (b.tools_hash >> 1)::BIGINT                                     AS tools_hash,
        (b.tools_set_hash >> 1)::BIGINT                                 AS tools_set_hash,
        (b.system_hash >> 1)::BIGINT                                    AS system_hash,
        coalesce(b.tools_bytes, 0)::BIGINT                              AS tools_bytes,
        b.explicit_cache                                                AS explicit_cache
    FROM req AS q
    LEFT JOIN positions AS p USING (rid_ord)
    LEFT JOIN per_request AS b USING (rid_ord)
    LEFT JOIN req AS reuse ON reuse.rid_ord = p.reuse_ord
)

SELECT * FROM final
