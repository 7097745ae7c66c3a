-- name: request_prefix
-- inputs: segments, requests, cache_rule_match
-- output: one row per request with everything the prefix views need from its segments, in ONE
--   pass over `segments` (the heavy step; materialised by `cacheaudit build`). Two windows:
--   per (cache scope, chained prefix hash) in arrival order, which earlier request last had the
--   same prefix at each position; per request in position order, cumulative bytes. Sharing is
--   contiguous from position 0 because prefix hashes are chained. Hashes here are 63-bit
--   fingerprints used only to compare requests (schemas/request_prefix.json).
WITH rules AS (
    SELECT * FROM cache_rule_match
),

req AS (
    SELECT
        r.request_id,
        row_number() OVER (ORDER BY r.started_at, r.request_id)         AS rid_ord,
        r.started_at,
        epoch_us(r.started_at)                                          AS t_us,
        r.provider, r.model, r.account, r.segment_count, r.prompt_bytes,
        r.cache_breakpoints,
        coalesce(m.lookback_s, 86400) * 1000000                         AS lookback_us,
        coalesce(
            CASE WHEN r.cache_write_1h_tokens > 0 OR list_contains(r.cache_ttls, '1h')
                 THEN m.extended_lifetime_s END,
            m.lifetime_s, m.lookback_s, 86400
        ) * 1000000                                                     AS lifetime_us,
        coalesce(m.breakpoint_lookback, 20)                             AS breakpoint_lookback
    FROM requests AS r
    LEFT JOIN rules AS m
      ON m.provider IS NOT DISTINCT FROM r.provider
     AND m.model IS NOT DISTINCT FROM r.model
     AND m.day = r.day
),

seg AS (
    -- numeric rows only: window sorts carry every column, and strings make them slow
    SELECT
        q.rid_ord, q.t_us, s.position, s.bytes,
        CASE s.kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 2 ELSE 3 END
            ::UTINYINT                                                  AS kind_code,
        CASE s.role WHEN 'system' THEN 1 WHEN 'developer' THEN 2 WHEN 'user' THEN 3
             WHEN 'assistant' THEN 4 WHEN 'tool' THEN 5 ELSE 0 END::UTINYINT AS role_code,
        hash(s.segment_hash)                                            AS sh,
        s.position = q.segment_count - 1                                AS is_end,
        coalesce(list_contains(q.cache_breakpoints, s.position), false) AS is_breakpoint,
        hash(s.prefix_hash, q.provider, q.model, q.account)             AS scoped_prefix
    FROM segments AS s
    JOIN req AS q USING (request_id)
),

windowed AS (
    SELECT
        rid_ord, position, t_us, bytes, kind_code, role_code, sh,
        -- the latest earlier request in scope with the same prefix up to this position
        lag(rid_ord) OVER same_prefix                                   AS prev_ord,
        lag(t_us) OVER same_prefix                                      AS prev_us,
        lag(t_us, 2) OVER same_prefix                                   AS prev2_us,
        -- the first request whose whole prompt ended here (a DeepSeek input unit), and the
        -- first with a cache_control breakpoint here (an Anthropic cache entry)
        min(CASE WHEN is_end THEN t_us END) OVER whole_prefix           AS first_end_us,
        min(CASE WHEN is_breakpoint THEN t_us END) OVER whole_prefix    AS first_breakpoint_us
    FROM seg
    WINDOW
        same_prefix AS (PARTITION BY scoped_prefix ORDER BY rid_ord),
        whole_prefix AS (PARTITION BY scoped_prefix)
),

flagged AS MATERIALIZED (
    SELECT
        w.rid_ord, w.position, w.bytes, w.kind_code, w.role_code, w.sh, w.prev_ord,
        w.prev_us >= w.t_us - q.lookback_us                             AS in_lookback,
        w.prev_us >= w.t_us - q.lifetime_us                             AS alive,
        w.prev_us >= w.t_us - q.lifetime_us AND w.first_end_us < w.t_us AS input_unit_alive,
        w.prev_us >= w.t_us - q.lifetime_us AND w.prev2_us IS NOT NULL  AS shared_unit_alive,
        w.prev_us >= w.t_us - q.lifetime_us AND w.first_breakpoint_us < w.t_us
            AND len(list_filter(
                q.cache_breakpoints,
                lambda b: b >= w.position AND b <= w.position + q.breakpoint_lookback
            )) > 0                                                      AS breakpoint_hit
    FROM windowed AS w
    JOIN req AS q USING (rid_ord)
),

-- pass A: positions per request (sharing is contiguous from 0, so counts are positions)
positions AS (
    SELECT
        rid_ord,
        count(*) FILTER (WHERE in_lookback)                             AS shared_segments,
        coalesce(sum(bytes) FILTER (WHERE in_lookback), 0)              AS shared_bytes,
        arg_max(prev_ord, position) FILTER (WHERE in_lookback)          AS reuse_ord,
        count(*) FILTER (WHERE alive)                                   AS live_segments,
        coalesce(sum(bytes) FILTER (WHERE alive), 0)                    AS live_bytes,
        min(position) FILTER (WHERE NOT coalesce(in_lookback, false))   AS first_diverging_position,
        arg_min(kind_code, position) FILTER (WHERE NOT coalesce(in_lookback, false))
                                                                        AS diverging_kind_code,
        arg_min(role_code, position) FILTER (WHERE NOT coalesce(in_lookback, false))
                                                                        AS diverging_role_code,
        max(position) FILTER (WHERE input_unit_alive)                   AS input_unit_end,
        max(position) FILTER (WHERE shared_unit_alive)                  AS shared_unit_end,
        max(position) FILTER (WHERE breakpoint_hit)                     AS breakpoint_end,
        min(position) FILTER (WHERE kind_code = 3)                      AS history_start,
        min(position) FILTER (WHERE role_code = 4)                      AS first_assistant,
        max(position) FILTER (WHERE role_code = 4)                      AS last_assistant,
        count(*) FILTER (WHERE kind_code = 3)                           AS history_segments,
        bit_xor(hash(xor(sh, position::UBIGINT))) FILTER (WHERE kind_code = 0)        AS tools_hash,
        bit_xor(sh) FILTER (WHERE kind_code = 0)                        AS tools_set_hash,
        bit_xor(hash(xor(sh, position::UBIGINT))) FILTER (WHERE kind_code IN (1, 2))  AS system_hash,
        coalesce(sum(bytes) FILTER (WHERE kind_code = 0), 0)            AS tools_bytes
    FROM flagged
    GROUP BY rid_ord
),

-- pass B: bytes up to those positions, and the history fingerprints (history = every segment
-- from the first message on, each hashed with its offset in the history)
per_request AS (
    SELECT
        f.rid_ord,
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
        bit_xor(hash(xor(f.sh, greatest(f.position - a.history_start, 0)::UBIGINT))) FILTER (WHERE f.position >= a.history_start)
                                                                        AS history_hash,
        bit_xor(hash(xor(f.sh, greatest(f.position - a.history_start, 0)::UBIGINT))) FILTER (
            WHERE f.position >= a.history_start AND f.position < a.last_assistant
        )                                                               AS before_last_reply_hash,
        bit_xor(hash(xor(f.sh, greatest(f.position - a.history_start, 0)::UBIGINT))) FILTER (
            WHERE f.position >= a.history_start AND f.position < a.first_assistant
        )                                                               AS before_first_reply_hash
    FROM flagged AS f
    JOIN positions AS a USING (rid_ord)
    GROUP BY f.rid_ord
),

final AS (
    SELECT
        q.request_id,
        q.rid_ord::BIGINT                                               AS arrival_order,
        q.started_at, q.provider, q.model, q.account, q.segment_count, q.prompt_bytes,
        coalesce(p.shared_segments, 0)::INTEGER                         AS shared_segments,
        coalesce(p.shared_bytes, 0)::BIGINT                             AS shared_bytes,
        reuse.request_id                                                AS reuse_request_id,
        reuse.started_at                                                AS reuse_started_at,
        coalesce(p.live_segments, 0)::INTEGER                           AS live_segments,
        coalesce(p.live_bytes, 0)::BIGINT                               AS live_bytes,
        p.first_diverging_position::INTEGER                             AS first_diverging_position,
        CASE p.diverging_kind_code WHEN 0 THEN 'tool' WHEN 1 THEN 'schema' WHEN 2 THEN 'system'
             WHEN 3 THEN 'message' END                                  AS diverging_kind,
        CASE p.diverging_role_code WHEN 1 THEN 'system' WHEN 2 THEN 'developer'
             WHEN 3 THEN 'user' WHEN 4 THEN 'assistant' WHEN 5 THEN 'tool' END AS diverging_role,
        b.unit_bytes::BIGINT                                            AS unit_bytes,
        b.breakpoint_bytes::BIGINT                                      AS breakpoint_bytes,
        p.history_start::INTEGER                                        AS history_start,
        p.first_assistant::INTEGER                                      AS first_assistant,
        p.last_assistant::INTEGER                                       AS last_assistant,
        coalesce(p.history_segments, 0)::INTEGER                        AS history_segments,
        (b.history_hash >> 1)::BIGINT                                   AS history_hash,
        (b.before_last_reply_hash >> 1)::BIGINT                         AS before_last_reply_hash,
        (b.before_first_reply_hash >> 1)::BIGINT                        AS before_first_reply_hash,
        (p.tools_hash >> 1)::BIGINT                                     AS tools_hash,
        (p.tools_set_hash >> 1)::BIGINT                                 AS tools_set_hash,
        (p.system_hash >> 1)::BIGINT                                    AS system_hash,
        coalesce(p.tools_bytes, 0)::BIGINT                              AS tools_bytes
    FROM req AS q
    LEFT JOIN positions AS p USING (rid_ord)
    LEFT JOIN per_request AS b USING (rid_ord)
    LEFT JOIN req AS reuse ON reuse.rid_ord = p.reuse_ord
)

SELECT * FROM final
