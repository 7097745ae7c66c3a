-- name: prefix_requests
-- inputs: requests, request_scopes, cache_rule_match
-- output: one row per request with what request_prefix needs of it: its arrival order, its
--   cache scope, when the entry it leaves becomes available and how long it lives. The first
--   stage of request_prefix, a view of its own so that `cacheaudit build` can cut a large
--   warehouse into groups of whole cache scopes (pipeline/prefix_groups.py).
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
--   (cache_rule_match is keyed by requests.model). request_scopes finds the serving model.
--   Without an account (no key seen: absent, or redacted before capture) the capture cannot
--   show which requests shared a key, so the scope joins only what it shows belongs together:
--   one source file, one session id (or none), and no gap between consecutive requests longer
--   than the longest lifetime any cache rule allows (after it nothing can be read, whoever
--   sent it). That is `cache_scope` (docs/capture.md, "Without an account"); request_scopes
--   finds the runs.
--   Arrival order is started_at, then the file and the record's position in it (numbered
--   within each UTC day, see rid_ord): a VCR
--   cassette's starts come from Date headers (one-second steps, so a conversation's turns
--   often tie) or are unknown (NULL, ordered after every known start); its record order is
--   the order the calls were made.
WITH rules AS (
    SELECT * FROM cache_rule_match
),

final AS (
    SELECT
        r.request_id,
        -- the arrival order as a number: the request's UTC day (days since 1970; an unknown
        -- start after every day) times 10^9, plus its rank within that day. A day's numbers
        -- depend on that day alone: requests ingested for other days leave them as they are
        coalesce(date_diff('day', DATE '1970-01-01', r.day), 9000000000)::BIGINT * 1000000000
            + row_number() OVER (
                PARTITION BY r.day ORDER BY r.started_at, r.source, r.source_index, r.request_id
            )                                                           AS rid_ord,
        r.started_at,
        epoch_us(r.started_at)                                          AS t_us,
        -- the provider processed it: a 2xx response (OTel spans carry no HTTP status: their
        -- outcome says). A refused request left no cache entry (see the header)
        coalesce(CASE WHEN r.status_code IS NOT NULL THEN r.status_code BETWEEN 200 AND 299
                      ELSE r.outcome = 'ok' END, false)                 AS writes_cache,
        -- when its cache entry became available: the first response byte
        greatest(coalesce(r.ttfb_ms, r.duration_ms, 0), 0)              AS available_after_ms,
        -- the cache scope as one number, hashed once per request rather than per segment
        hash(r.provider, coalesce(s.served_model, r.model), coalesce(r.account, s.run_scope))
                                                                        AS scope_hash,
        coalesce(r.account, s.run_scope)                                AS cache_scope,
        r.provider, coalesce(s.served_model, r.model) AS model, r.account, r.segment_count,
        r.prompt_bytes, r.cache_breakpoints,
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
    LEFT JOIN request_scopes AS s USING (request_id)
    LEFT JOIN rules AS m
      ON m.provider IS NOT DISTINCT FROM r.provider
     AND m.model IS NOT DISTINCT FROM r.model
     AND m.day = r.day
)

SELECT * FROM final
