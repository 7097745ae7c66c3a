-- name: request_prefix
-- inputs: segments, requests, cache_rule_match, cache_rules
-- output: one row per request with everything the prefix views need from its segments (the
--   heavy step; materialised by `cacheaudit build`). One window over the segments: per (cache
--   scope, chained prefix hash), which earlier request last had the same prefix at each
--   position, and which cache entries were there when this request arrived. Sharing is
--   contiguous from position 0 because prefix hashes are chained.
--   A cache entry is written only by a request the provider processed: one with a 2xx response
--   (a stream cut later, or an error inside a 200 stream, still wrote it); a refused request
--   (an HTTP error status, or no response at all) never did, though it still counts for
--   sharing and linking. The entry becomes available when the first response byte arrives
--   (started_at + ttfb_ms, else + duration_ms, else started_at): Anthropic documents
--   that a cache entry is available only once the first response begins, and the same is
--   assumed for every provider. So parallel requests sent before an earlier one's first byte
--   cannot read it.
--   The cache scope is (provider, model, account), where the model is the one that served the
--   request. A refused request (its error body names no model, so its model is the name it
--   asked for) takes the model a processed request of the same name was answered with, in the
--   same account and provider: the latest earlier one, else the next. OpenAI and Anthropic
--   answer an alias (gpt-4.1) with a snapshot (gpt-4.1-2025-04-14): a 429 is not a switch to
--   another model. A processed request keeps the model its response named, even the requested
--   name (an OpenRouter fallback answers one request with another model, the next with the
--   one asked for). The cache rule is still the one of the request's own model
--   (cache_rule_match is keyed by requests.model).
--   Without an account (no key seen: absent, or redacted before capture) the capture cannot
--   show which requests shared a key, so the scope joins only what it shows belongs together:
--   one source file, one session id (or none), and no gap between consecutive requests longer
--   than the longest lifetime any cache rule allows (after it nothing can be read, whoever
--   sent it). That is `cache_scope` (docs/capture.md, "Without an account").
--   Hashes here are 63-bit fingerprints used only to compare requests
--   (schemas/request_prefix.json).
--   Cost notes (bench/views.py): the window sort is the one expensive step, so it carries only
--   narrow numeric columns and one window specification (one sort); the entry a request can
--   read is found among the four requests before it (lags, no second pass); counts, bytes and
--   the tools, system and history fingerprints come from one cheap re-scan of `seg` grouped by
--   request instead of widening that sort.
WITH rules AS (
    SELECT * FROM cache_rule_match
),

-- the longest any rule keeps an entry (a day if no rule publishes one)
longest AS (
    SELECT coalesce(max(greatest(coalesce(lifetime_s, 0), coalesce(extended_lifetime_s, 0))),
                    86400) * 1000000                                    AS longest_us
    FROM cache_rules
),

-- requests without an account, in runs: a gap over the longest lifetime starts a new one
unscoped AS (
    SELECT
        request_id, source, session_id, provider, started_at,
        epoch_us(started_at) - lag(epoch_us(started_at)) OVER (
            PARTITION BY source, session_id, provider ORDER BY started_at, request_id
        )                                                               AS gap_us
    FROM requests
    WHERE account IS NULL
),

runs AS (
    SELECT
        u.request_id,
        'no account: ' || coalesce(u.source, '') || ' | session ' || coalesce(u.session_id, '')
            || ' | run ' || sum(CASE WHEN u.gap_us > l.longest_us THEN 1 ELSE 0 END) OVER (
                PARTITION BY u.source, u.session_id, u.provider
                ORDER BY u.started_at, u.request_id
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)::VARCHAR AS cache_scope
    FROM unscoped AS u
    CROSS JOIN longest AS l
),

-- the model that served each request (see the header). `answer` is the model of a processed
-- request (as writes_cache below); a refused one takes the latest earlier answer to the same
-- name in its account and provider, else the next one
processed AS (
    SELECT
        request_id, provider, account, requested_model, started_at, model,
        coalesce(CASE WHEN status_code IS NOT NULL THEN status_code BETWEEN 200 AND 299
                      ELSE outcome = 'ok' END, false)                   AS answered
    FROM requests
),

answers AS (
    SELECT *, CASE WHEN answered THEN model END                        AS answer
    FROM processed
),

served AS (
    SELECT
        request_id,
        CASE WHEN requested_model IS NOT NULL AND NOT answered
             THEN coalesce(
                 last_value(answer IGNORE NULLS) OVER (
                     PARTITION BY account, provider, requested_model
                     ORDER BY started_at, request_id
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                 first_value(answer IGNORE NULLS) OVER (
                     PARTITION BY account, provider, requested_model
                     ORDER BY started_at, request_id
                     ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING),
                 model)
             ELSE model END                                             AS served_model
    FROM answers
),

req AS (
    SELECT
        r.request_id,
        row_number() OVER (ORDER BY r.started_at, r.request_id)         AS rid_ord,
        r.started_at,
        epoch_us(r.started_at)                                          AS t_us,
        -- the provider processed it: a 2xx response (OTel spans carry no HTTP status: their
        -- outcome says). A refused request left no cache entry (see the header)
        coalesce(CASE WHEN r.status_code IS NOT NULL THEN r.status_code BETWEEN 200 AND 299
                      ELSE r.outcome = 'ok' END, false)                 AS writes_cache,
        -- when its cache entry became available: the first response byte
        greatest(coalesce(r.ttfb_ms, r.duration_ms, 0), 0)              AS available_after_ms,
        -- the cache scope as one number, hashed once per request rather than per segment
        hash(r.provider, v.served_model, coalesce(r.account, u.cache_scope)) AS scope_key,
        coalesce(r.account, u.cache_scope)                              AS cache_scope,
        r.provider, v.served_model AS model, r.account, r.segment_count, r.prompt_bytes,
        r.cache_breakpoints,
        coalesce(m.lookback_s, 86400) * 1000000                         AS lookback_us,
        -- NULL = the entry does not expire. A rule with no published lifetime (Gemini implicit,
        -- vLLM, SGLang) keeps an entry until the provider evicts it (vLLM and SGLang
        -- evict only when they need the room), so a later miss is the provider's (eviction or
        -- capacity): cache_breaks calls it provider_miss, never expired,
        -- as no lifetime was published for the user to stay within. Without any rule: a day
        CASE WHEN m.rule_id IS NULL THEN 86400 ELSE m.lifetime_s END * 1000000
                                                                        AS lifetime_us,
        CASE WHEN m.rule_id IS NULL THEN 86400
             ELSE coalesce(m.extended_lifetime_s, m.lifetime_s) END * 1000000
                                                                        AS extended_lifetime_us,
        -- the leading positions the extended lifetime covers. Each cache_control breakpoint is
        -- its own cache entry with its own TTL: the prefix up to the last 1h breakpoint lives
        -- 1h, positions after it only the default 5m (cache_ttls[i] is breakpoint i's TTL). A
        -- retention asked for the whole request (OpenAI 24h), or a 1h write reported with no
        -- markers to place it, covers every position
        CASE
            WHEN list_contains(r.cache_ttls, '24h') THEN r.segment_count
            WHEN list_contains(r.cache_ttls, '1h') AND r.cache_breakpoints IS NOT NULL
                THEN coalesce(list_max(list_filter(
                    r.cache_breakpoints, lambda b, i: r.cache_ttls[i] = '1h'
                )) + 1, 0)
            WHEN r.cache_write_1h_tokens > 0 THEN r.segment_count
            ELSE 0
        END                                                             AS extended_segments,
        coalesce(m.breakpoint_lookback, 20)                             AS breakpoint_lookback,
        list_max(r.cache_breakpoints)                                   AS last_breakpoint
    FROM requests AS r
    JOIN served AS v USING (request_id)
    LEFT JOIN runs AS u USING (request_id)
    LEFT JOIN rules AS m
      ON m.provider IS NOT DISTINCT FROM r.provider
     AND m.model IS NOT DISTINCT FROM r.model
     AND m.day = r.day
),

seg AS NOT MATERIALIZED (
    -- numeric rows only: sorts and aggregates carry every column, and strings make them slow
    SELECT
        q.rid_ord, q.t_us, s.position, s.bytes,
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
        -- a Gemini explicit cache (`cachedContent`) is its own kind: the prefix before the
        -- tools, never the start of the history
        CASE s.kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 2
             WHEN 'cached_content' THEN 4 ELSE 3 END::UTINYINT          AS kind_code,
        -- the reply role: `assistant`, or `model` in the Gemini dialects
        CASE s.role WHEN 'system' THEN 1 WHEN 'developer' THEN 2 WHEN 'user' THEN 3
             WHEN 'assistant' THEN 4 WHEN 'model' THEN 4 WHEN 'tool' THEN 5 ELSE 0 END
            ::UTINYINT                                                  AS role_code,
        s.segment_hash,
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
        s.position <= q.last_breakpoint                                 AS is_marked,
        hash(s.prefix_hash, q.scope_key)                                AS scoped_prefix
    FROM segments AS s
    JOIN req AS q USING (request_id)
),

-- one window specification, so one sort; a whole-partition frame replaces a second window
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
        lag(expires_us, 2) OVER same_prefix                             AS expires_2,
        lag(available_us, 3) OVER same_prefix                           AS available_3,
        lag(expires_us, 3) OVER same_prefix                             AS expires_3,
        lag(available_us, 4) OVER same_prefix                           AS available_4,
        lag(expires_us, 4) OVER same_prefix                             AS expires_4,
        -- the first entry available whose whole prompt ended here (a DeepSeek input unit), and
        -- the first with a cache_control breakpoint here (an Anthropic cache entry): one
        -- available before this request arrived exists when that is before t_us
        min(CASE WHEN is_end THEN available_us END) OVER whole_prefix   AS first_end_us,
        min(CASE WHEN is_breakpoint THEN available_us END) OVER whole_prefix
                                                                        AS first_breakpoint_us
    FROM seg
    WINDOW
        same_prefix AS (PARTITION BY scoped_prefix ORDER BY rid_ord),
        whole_prefix AS (
            PARTITION BY scoped_prefix ORDER BY rid_ord
            ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING
        )
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
    FROM windowed
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
        max(position) FILTER (WHERE is_live AND first_end_us < t_us)    AS input_unit_end,
        max(position) FILTER (WHERE is_live AND shared_by_two)          AS shared_unit_end,
        max(position) FILTER (
            WHERE is_live AND first_breakpoint_us < t_us AND breakpoint_near
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
        bit_xor(hash(xor(hash(f.segment_hash), f.position::UBIGINT))) FILTER (WHERE f.kind_code = 0)
                                                                        AS tools_hash,
        bit_xor(hash(f.segment_hash)) FILTER (WHERE f.kind_code = 0)    AS tools_set_hash,
        -- the system layer: output schema, system prompt and an explicit cache (cachedContent)
        bit_xor(hash(xor(hash(f.segment_hash), f.position::UBIGINT))) FILTER (WHERE f.kind_code IN (1, 2, 4))
                                                                        AS system_hash,
        sum(f.bytes) FILTER (WHERE f.kind_code = 0)                     AS tools_bytes,
        -- a Gemini explicit cache (cachedContent): made outside the captured traffic
        bool_or(f.kind_code = 4)                                        AS explicit_cache,
        bit_xor(hash(xor(hash(f.segment_hash), greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start)                AS history_hash,
        bit_xor(hash(xor(hash(f.segment_hash), greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start AND f.position < a.last_assistant)
                                                                        AS before_last_reply_hash,
        bit_xor(hash(xor(hash(f.segment_hash), greatest(f.position - a.history_start, 0)::UBIGINT)))
            FILTER (WHERE f.position >= a.history_start AND f.position < a.first_assistant)
                                                                        AS before_first_reply_hash,
        -- the first exchange: the history through the first reply and the segment after it,
        -- shared by every later turn of the lineage (conversations.sql)
        bit_xor(hash(xor(hash(f.segment_hash), greatest(f.position - a.history_start, 0)::UBIGINT)))
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
