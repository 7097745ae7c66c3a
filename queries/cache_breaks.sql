-- name: cache_breaks
-- inputs: conversations, request_prefix, expected_cache, requests, segments, raw_segment_content
-- output: one row per request where a reusable prefix was lost, with ONE primary cause, the
--   first of: cold_start (first turn of a conversation: nothing earlier to reuse), expired (same
--   model as the parent; the gap since the parent is longer than the lifetime the parent gave the
--   first entry lost and no other request kept the prefix alive), model_changed (provider or
--   model differs from the parent's; the model that served it, request_prefix.model, so a
--   refused request named by its alias is no switch), tools_changed, system_changed (system
--   prompt or output schema), history_rewritten (an earlier message edited, dropped or
--   summarised) -- these three by the first segment that differs from the parent's prompt --,
--   below_minimum (the live prefix is shorter than the rule's minimum), and provider_miss (the
--   rules allowed a read; the reported read is under half of it and at least 256 tokens short).
--   For a changed segment: the byte offset of the first difference inside it, a class of the
--   changed text, and a short redacted excerpt (schemas/cache_breaks.json).
--   expired, model_changed and the three changes need a reusable prefix: none is named when the
--   parent's rule would have served nothing of its prompt (under the minimum, an Anthropic
--   prompt without cache_control; docs/providers.md), and their loss is capped at what
--   it would have served. A fork (the same history, other last messages: parallel requests) is
--   no history_rewritten. An entry idles from its first response byte, when it became usable.
--   A re-send of the same prompt (conversations.link_method resend) is no break.
--   tokens_lost is NULL (unknown) when this request's or its parent's input tokens are unknown
--   (e.g. an interrupted stream) or neither the reported nor the expected read is; a cold
--   start's is 0. A request without prompt segments (an OTel span that carried no content)
--   cannot be analysed, so it gets no row at all, not a cold start.
WITH conversation_rows AS MATERIALIZED (
    -- read once: the names are joined back onto the breaks at the end, and a second reading of
    -- a view computed on the fly (no build) would compute it again
    SELECT
        request_id, conversation_id, turn, parent_request_id, started_at, agent, provider,
        model, account, link_method
    FROM conversations
),

turns AS (
    SELECT
        -- names are joined back onto the breaks only (final): carried through every step, on
        -- 10M requests they made these tables too large for a build's memory cap
        c.request_id, p.arrival_order, c.turn, c.parent_request_id, c.started_at,
        -- compared with the parent's only; NULL stays NULL, so they compare as the names do
        CASE WHEN c.provider IS NOT NULL THEN hash(c.provider) END     AS provider_key,
        CASE WHEN c.model IS NOT NULL THEN hash(c.model) END           AS model_key,
        c.link_method = 'resend'                                        AS resent,
        p.segment_count, p.shared_segments, p.reuse_request_id, p.live_segments,
        p.tools_hash, p.tools_set_hash, p.history_start, p.last_assistant,
        p.available_after_ms,
        r.input_tokens, r.cache_read_tokens,
        p.extended_segments,
        e.expected_read_tokens, e.live_tokens_est, e.min_tokens, e.lifetime_s,
        e.default_lifetime_s, e.extended_lifetime_s, e.unit_model, e.granularity_tokens,
        e.cacheable_tokens_est
    FROM conversation_rows AS c
    JOIN request_prefix AS p USING (request_id)
    JOIN requests AS r USING (request_id)
    JOIN expected_cache AS e USING (request_id)
    WHERE coalesce(p.segment_count, 0) > 0
),

with_parent AS (
    SELECT
        t.*,
        p.provider_key AS parent_provider_key, p.model_key AS parent_model_key,
        p.segment_count AS parent_segments, p.started_at AS parent_started_at,
        p.input_tokens AS parent_input_tokens, p.tools_hash AS parent_tools_hash,
        p.extended_segments AS parent_extended_segments,
        p.tools_set_hash AS parent_tools_set_hash,
        p.history_start AS parent_history_start, p.last_assistant AS parent_last_assistant,
        p.available_after_ms AS parent_available_after_ms,
        p.unit_model AS parent_unit_model, p.min_tokens AS parent_min_tokens,
        p.granularity_tokens AS parent_granularity, p.cacheable_tokens_est AS parent_cacheable
    FROM turns AS t
    LEFT JOIN turns AS p ON p.request_id = t.parent_request_id
),

-- where the prompt first differs from the parent's: prefix_reuse already knows it when the
-- parent is the request it shares the longest prefix with; otherwise compare position by position
-- (chained prefix hashes: the count of equal positions is the shared length). Both need a few
-- segment rows of a few requests: ONE scan of `segments` fetches them all (the pairs to compare
-- in full, the others at the known position only), keyed by the child request's arrival order
-- (a number: these rows are many, a few per segment of the compared prompts).
known AS (
    SELECT
        request_id, arrival_order, parent_request_id,
        reuse_request_id IS DISTINCT FROM parent_request_id             AS to_compare,
        CASE WHEN reuse_request_id = parent_request_id AND shared_segments < parent_segments
             THEN shared_segments END                                   AS at_position
    FROM with_parent
    WHERE parent_request_id IS NOT NULL
),

wanted AS (
    SELECT
        request_id AS seg_request_id, arrival_order AS child_order, true AS is_new, to_compare,
        at_position
    FROM known
    WHERE to_compare OR at_position IS NOT NULL
    UNION ALL
    SELECT parent_request_id, arrival_order, false, to_compare, at_position
    FROM known
    WHERE to_compare OR at_position IS NOT NULL
),

fetched AS MATERIALIZED (
    SELECT
        w.child_order, w.is_new, w.to_compare, s.position, s.kind, s.role, s.segment_hash,
        hash(s.prefix_hash)                                             AS prefix_key
    FROM segments AS s
    JOIN wanted AS w
      ON s.request_id = w.seg_request_id
     AND (w.at_position IS NULL OR s.position = w.at_position)
),

compared AS (
    SELECT n.child_order AS arrival_order, count(o.position) AS common_segments
    FROM fetched AS n
    LEFT JOIN fetched AS o
      ON o.child_order = n.child_order
     AND NOT o.is_new
     AND o.position = n.position
     AND o.prefix_key = n.prefix_key
    WHERE n.is_new AND n.to_compare
    GROUP BY n.child_order
),

diverged AS (
    SELECT
        w.*,
        CASE WHEN w.parent_request_id IS NULL THEN NULL
             WHEN w.reuse_request_id = w.parent_request_id THEN w.shared_segments
             ELSE coalesce(k.common_segments, 0) END                    AS common_segments,
        -- microseconds, as request_prefix measures lifetimes: whole milliseconds would drop a
        -- request that came less than a millisecond after the entry expired from both causes
        (epoch_us(w.started_at) - epoch_us(w.parent_started_at)) / 1e6   AS gap_s,
        -- idle time of the parent's entry: from when it became available (its first response
        -- byte), as request_prefix counts lifetimes; NULL when the parent
        -- was refused and left no entry
        (epoch_us(w.started_at) - epoch_us(w.parent_started_at)
            - round(w.parent_available_after_ms * 1000)::BIGINT) / 1e6  AS idle_s,
        -- the most this request could have read had nothing changed since its parent: the
        -- parent's prompt up to what its entry covers, no longer than this prompt, rounded as
        -- the parent's rule serves it (minimum, granularity).
        -- Without a rule, unrounded; NULL when a count is unknown
        CASE
            WHEN w.parent_request_id IS NULL THEN NULL
            WHEN w.parent_unit_model IS NULL THEN
                CASE WHEN w.parent_input_tokens IS NOT NULL AND w.input_tokens IS NOT NULL
                     THEN least(w.parent_input_tokens, w.input_tokens) END
            WHEN w.parent_unit_model = 'none' THEN 0
            WHEN w.parent_cacheable IS NULL OR w.input_tokens IS NULL THEN NULL
            WHEN least(w.parent_cacheable, w.input_tokens) < coalesce(w.parent_min_tokens, 0)
                THEN 0
            ELSE least(w.parent_cacheable, w.input_tokens)
                // coalesce(w.parent_granularity, 1) * coalesce(w.parent_granularity, 1)
        END                                                             AS reusable_tokens,
        -- what the rules say of the read itself, once nothing upstream explains a loss: the
        -- live prefix is under the rule's minimum, or the provider served well under what the
        -- rules allowed
        CASE
            WHEN w.expected_read_tokens = 0 AND w.live_tokens_est > 0
                 AND w.live_tokens_est < w.min_tokens THEN 'below_minimum'
            WHEN w.cache_read_tokens IS NOT NULL AND w.expected_read_tokens > 0
                 AND w.cache_read_tokens < w.expected_read_tokens * 0.5
                 AND w.expected_read_tokens - w.cache_read_tokens >= 256 THEN 'provider_miss'
        END                                                             AS read_cause
    FROM with_parent AS w
    LEFT JOIN compared AS k USING (arrival_order)
),

-- the segments of this request and of its parent at the first difference
change_rows AS (
    SELECT d.arrival_order, f.is_new, f.kind, f.role, f.segment_hash
    FROM fetched AS f
    JOIN diverged AS d ON f.child_order = d.arrival_order AND f.position = d.common_segments
    WHERE d.common_segments < d.parent_segments
),

at_change AS (
    SELECT
        d.arrival_order,
        rs.kind AS new_kind, rs.role AS new_role, rs.segment_hash AS new_hash,
        ps.kind AS old_kind, ps.role AS old_role, ps.segment_hash AS old_hash
    FROM diverged AS d
    LEFT JOIN change_rows AS rs ON rs.arrival_order = d.arrival_order AND rs.is_new
    LEFT JOIN change_rows AS ps ON ps.arrival_order = d.arrival_order AND NOT ps.is_new
    WHERE d.common_segments < d.parent_segments
),

caused AS (
    SELECT
        d.*, a.new_kind, a.new_role, a.new_hash, a.old_kind, a.old_role, a.old_hash,
        -- the lifetime the parent gave the first entry lost (as `expired` below compares it):
        -- the extended one (1h, 24h) when it asked for it at that position, else the default
        CASE WHEN d.live_segments < d.parent_extended_segments
             THEN coalesce(d.extended_lifetime_s, d.lifetime_s)
             ELSE coalesce(d.default_lifetime_s, d.lifetime_s) END      AS entry_lifetime_s,
        -- the earliest prompt layer touched: 0 tools, 1 system/schema/explicit cache, 2 messages
        least(
            CASE a.new_kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 1
                            WHEN 'cached_content' THEN 1
                 WHEN 'message' THEN 2 END,
            CASE a.old_kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 1
                            WHEN 'cached_content' THEN 1
                 WHEN 'message' THEN 2 END
        )                                                               AS layer,
        CASE
            WHEN d.parent_request_id IS NULL THEN 'cold_start'
            -- the same prompt sent again (conversations: resend) changed nothing: no break
            WHEN d.resent THEN NULL
            -- expired, model_changed and the three changes name what lost a reusable prefix:
            -- none when the rules would have served nothing from the parent's prompt anyway
            -- (under the minimum, an Anthropic prompt without cache_control, no caching)
            WHEN d.reusable_tokens = 0 THEN d.read_cause
            -- the lifetime the parent gave the first entry lost: the extended one (1h, 24h)
            -- when it asked for it at that position, else the rule's default (5m breakpoint),
            -- counted from when the parent's entry became available. Only in the parent's own
            -- cache scope: after a model switch the live prefix is counted in another cache,
            -- so whether other traffic warmed it would decide the cause. A rule with no
            -- published lifetime never expires an entry (request_prefix): its misses are
            -- provider_miss
            WHEN d.lifetime_s IS NOT NULL
                 AND d.provider_key IS NOT DISTINCT FROM d.parent_provider_key
                 AND d.model_key IS NOT DISTINCT FROM d.parent_model_key
                 AND d.idle_s > CASE WHEN d.live_segments < d.parent_extended_segments
                                     THEN coalesce(d.extended_lifetime_s, d.lifetime_s)
                                     ELSE coalesce(d.default_lifetime_s, d.lifetime_s) END
                 AND d.live_segments < least(d.common_segments, d.parent_segments)
                THEN 'expired'
            WHEN d.provider_key IS DISTINCT FROM d.parent_provider_key
                 OR d.model_key IS DISTINCT FROM d.parent_model_key THEN 'model_changed'
            -- a fork: the prompt follows the parent's through its last reply (or through part
            -- of an opening without one) and only the new messages after it differ, e.g.
            -- parallel requests asking different questions of the same history. Nothing
            -- earlier was rewritten: only the read itself is judged, as for a continuation
            WHEN d.common_segments < d.parent_segments
                 AND coalesce(a.new_kind, 'message') = 'message'
                 AND coalesce(a.old_kind, 'message') = 'message'
                 AND d.common_segments > coalesce(d.parent_last_assistant, d.parent_history_start)
                THEN d.read_cause
            WHEN d.common_segments < d.parent_segments THEN
                CASE least(
                    CASE a.new_kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 1
                                    WHEN 'cached_content' THEN 1
                         ELSE 2 END,
                    CASE a.old_kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 1
                                    WHEN 'cached_content' THEN 1
                         ELSE 2 END)
                    WHEN 0 THEN 'tools_changed' WHEN 1 THEN 'system_changed'
                    ELSE 'history_rewritten' END
            ELSE d.read_cause
        END                                                             AS cause
    FROM diverged AS d
    LEFT JOIN at_change AS a USING (arrival_order)
),

breaks AS (
    SELECT * FROM caused WHERE cause IS NOT NULL
),

-- the text of only the changed segments, deduplicated like view segment_content but after
-- the filter: that view groups every distinct segment of the warehouse
changed_hashes AS (
    SELECT new_hash AS segment_hash FROM breaks WHERE new_hash IS NOT NULL
    UNION
    SELECT old_hash FROM breaks WHERE old_hash IS NOT NULL
),

changed_content AS (
    SELECT c.segment_hash, any_value(c.content) AS content
    FROM raw_segment_content AS c
    SEMI JOIN changed_hashes AS h ON h.segment_hash = c.segment_hash
    GROUP BY c.segment_hash
),

contents AS (
    SELECT
        b.request_id,
        coalesce(n.content, '')                                         AS new_text,
        coalesce(o.content, '')                                         AS old_text,
        -- the earlier segment's text was not kept (ingested with --no-content): where the
        -- change starts is unknown, not byte 0
        b.old_hash IS NULL OR o.content IS NOT NULL                     AS old_known
    FROM breaks AS b
    LEFT JOIN changed_content AS n ON n.segment_hash = b.new_hash
    LEFT JOIN changed_content AS o ON o.segment_hash = b.old_hash
    WHERE b.cause IN ('tools_changed', 'system_changed', 'history_rewritten')
),

-- common prefix and suffix of old and new text, by binary search over lengths
prefix_len AS (
    SELECT
        *,
        list_reduce(
            [1048576, 524288, 262144, 131072, 65536, 32768, 16384, 8192, 4096, 2048, 1024, 512,
             256, 128, 64, 32, 16, 8, 4, 2, 1],
            lambda acc, step: CASE
                WHEN acc + step <= least(length(new_text), length(old_text))
                     AND left(new_text, acc + step) = left(old_text, acc + step)
                THEN acc + step ELSE acc END,
            0
        )                                                               AS lcp
    FROM contents
),

suffix_len AS (
    SELECT
        *,
        list_reduce(
            [1048576, 524288, 262144, 131072, 65536, 32768, 16384, 8192, 4096, 2048, 1024, 512,
             256, 128, 64, 32, 16, 8, 4, 2, 1],
            lambda acc, step: CASE
                WHEN acc + step <= least(length(new_text), length(old_text)) - lcp
                     AND right(new_text, acc + step) = right(old_text, acc + step)
                THEN acc + step ELSE acc END,
            0
        )                                                               AS lcs
    FROM prefix_len
),

regions AS (
    SELECT
        *,
        substr(new_text, lcp + 1, length(new_text) - lcp - lcs)         AS new_part,
        substr(old_text, lcp + 1, length(old_text) - lcp - lcs)         AS old_part,
        -- the change with some context, to recognise a date or an id cut by the boundary
        substr(new_text, greatest(lcp - 35, 1), length(new_text) - lcp - lcs + 72) AS new_window,
        substr(old_text, greatest(lcp - 35, 1), length(old_text) - lcp - lcs + 72) AS old_window
    FROM suffix_len
),

classified AS (
    SELECT
        request_id, lcp, new_part, old_part,
        CASE WHEN new_text = '' OR NOT old_known THEN NULL
             ELSE strlen(left(new_text, lcp)) END                       AS change_offset,
        CASE
            WHEN new_text = '' OR old_text = '' THEN 'other'
            WHEN regexp_replace(new_text, '\s+', '', 'g') = regexp_replace(old_text, '\s+', '', 'g')
                THEN 'whitespace'
            WHEN regexp_matches(new_window || ' ' || old_window,
                 '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-f]{16,}|[0-9A-F]{16,}')
                THEN 'uuid'
            WHEN regexp_matches(new_window || ' ' || old_window,
                 '\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}(:\d{2})?|\b1[5-9]\d{8}(\d{3})?\b')
                THEN 'timestamp'
            WHEN length(new_part) = length(old_part) AND length(new_part) > 1
                 AND contains(new_part, '"')
                 AND list_sort(string_split(new_part, '')) = list_sort(string_split(old_part, ''))
                THEN 'reordered'
            WHEN regexp_matches(new_part, '^[0-9.,]*$') AND regexp_matches(old_part, '^[0-9.,]*$')
                THEN 'counter'
            ELSE 'other'
        END                                                             AS change_class,
        -- context kept short and redacted (the same key patterns as pipeline.redact): redact a
        -- wide window first so a key cut by the excerpt's edge is still recognised
        regexp_replace(
            substr(new_text, greatest(lcp - 119, 1), 240 + least(length(new_part), 40)),
            '(sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,})',
            '[REDACTED]', 'g'
        )                                                               AS new_wide,
        regexp_replace(
            substr(old_text, greatest(lcp - 119, 1), 240 + least(length(old_part), 40)),
            '(sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,})',
            '[REDACTED]', 'g'
        )                                                               AS old_wide,
        least(lcp, 119)                                                 AS wide_at
    FROM regions
),

excerpts AS (
    SELECT
        request_id, change_offset, change_class,
        nullif(substr(new_wide, greatest(wide_at - 24, 0) + 1,
                      least(wide_at, 24) + least(length(new_part), 40) + 24), '') AS excerpt,
        nullif(substr(old_wide, greatest(wide_at - 24, 0) + 1,
                      least(wide_at, 24) + least(length(old_part), 40) + 24), '') AS parent_excerpt
    FROM classified
),

final AS (
    SELECT
        b.request_id, c.conversation_id, b.turn, b.parent_request_id, b.started_at, c.agent,
        c.provider, c.model, c.account, b.cause,
        -- unknown stays NULL: no loss is computed from a missing count (least and greatest
        -- skip NULLs, so every operand is tested first). A cold start loses nothing whatever
        -- its usage: there was nothing earlier to reuse. The read is the reported one, else the
        -- one the rules allow (an estimate; below_minimum's is 0). Otherwise the loss is what
        -- the rules would have served from the parent's prompt had nothing changed
        -- (reusable_tokens: the rule's minimum, granularity and breakpoints applied) less the
        -- read.
        CASE
            WHEN b.cause = 'cold_start' THEN 0
            WHEN b.cause = 'provider_miss' THEN b.expected_read_tokens - b.cache_read_tokens
            WHEN b.cause = 'below_minimum'
                THEN b.live_tokens_est - coalesce(b.cache_read_tokens, b.expected_read_tokens)
            WHEN b.input_tokens IS NULL OR b.parent_input_tokens IS NULL
                 OR b.reusable_tokens IS NULL
                 OR coalesce(b.cache_read_tokens, b.expected_read_tokens) IS NULL THEN NULL
            ELSE greatest(
                b.reusable_tokens - coalesce(b.cache_read_tokens, b.expected_read_tokens), 0)
        END::BIGINT                                                     AS tokens_lost,
        b.input_tokens, b.cache_read_tokens, b.expected_read_tokens,
        b.gap_s,
        CASE WHEN b.cause = 'expired' THEN b.idle_s END                 AS idle_s,
        CASE WHEN b.cause = 'expired' THEN b.entry_lifetime_s END::DOUBLE AS lifetime_s,
        CASE WHEN b.cause IN ('tools_changed', 'system_changed', 'history_rewritten')
             THEN b.common_segments END::INTEGER                        AS changed_position,
        CASE WHEN b.cause IN ('tools_changed', 'system_changed', 'history_rewritten')
             THEN coalesce(b.new_kind, b.old_kind) END                  AS changed_kind,
        CASE WHEN b.cause IN ('tools_changed', 'system_changed', 'history_rewritten')
             THEN coalesce(b.new_role, b.old_role) END                  AS changed_role,
        x.change_offset::BIGINT                                         AS change_offset,
        CASE
            WHEN b.cause = 'tools_changed' AND b.tools_set_hash = b.parent_tools_set_hash
                THEN 'reordered'
            WHEN b.cause = 'history_rewritten' AND b.new_hash IS NULL THEN 'dropped'
            ELSE x.change_class
        END                                                             AS change_class,
        x.excerpt, x.parent_excerpt
    FROM breaks AS b
    JOIN conversation_rows AS c USING (request_id)
    LEFT JOIN excerpts AS x USING (request_id)
)

SELECT * FROM final
