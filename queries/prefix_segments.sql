-- name: prefix_segments
-- inputs: segments
-- output: one numeric row per segment of every request (its request_id aside): position, size,
--   kind and role as numbers, the segment's own and chained-prefix fingerprints as
--   numbers, and the request's day. The second stage of request_prefix, the only one over every segment: request_prefix
--   joins it to prefix_requests, and `cacheaudit build` writes it once, split by cache scope,
--   when the warehouse is too large for one window (pipeline/prefix_groups.py). Strings make
--   sorts and aggregates slow, so only the join key stays one.
--   Hashes are 64-bit fingerprints used only to compare rows.
WITH final AS (
    SELECT
        s.request_id, s.position, s.bytes,
        -- a Gemini explicit cache (`cachedContent`) is its own kind: the prefix before the
        -- tools, never the start of the history
        CASE s.kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 2
             WHEN 'cached_content' THEN 4 ELSE 3 END::UTINYINT          AS kind_code,
        -- the reply role: `assistant`, or `model` in the Gemini dialects
        CASE s.role WHEN 'system' THEN 1 WHEN 'developer' THEN 2 WHEN 'user' THEN 3
             WHEN 'assistant' THEN 4 WHEN 'model' THEN 4 WHEN 'tool' THEN 5 ELSE 0 END
            ::UTINYINT                                                  AS role_code,
        hash(s.segment_hash)                                            AS content_hash,
        hash(s.prefix_hash)                                             AS chain_hash,
        -- the request's day, the partition of the segment's part: a build that computes a
        -- few days reads the parts of those days alone (pipeline/prefix_days.py)
        s.day
    FROM segments AS s
)

SELECT * FROM final
