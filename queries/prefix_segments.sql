-- name: prefix_segments
-- inputs: segments, prefix_requests
-- output: one numeric row per segment of every request: its request's arrival order, its
--   position, size, kind and role as numbers, and the fingerprints request_prefix compares
--   (the prefix within the request's cache scope, and the segment's own content). The second
--   stage of request_prefix, and the only one over every segment; `cacheaudit build` writes it
--   once, split by cache scope, when the warehouse is too large for one window
--   (pipeline/prefix_shards.py), so it carries only what the request's row cannot give.
--   Hashes are 64-bit fingerprints used only to compare rows.
WITH final AS (
    -- numeric rows only: sorts and aggregates carry every column, and strings make them slow
    SELECT
        q.rid_ord, s.position, s.bytes,
        -- a Gemini explicit cache (`cachedContent`) is its own kind: the prefix before the
        -- tools, never the start of the history
        CASE s.kind WHEN 'tool' THEN 0 WHEN 'schema' THEN 1 WHEN 'system' THEN 2
             WHEN 'cached_content' THEN 4 ELSE 3 END::UTINYINT          AS kind_code,
        -- the reply role: `assistant`, or `model` in the Gemini dialects
        CASE s.role WHEN 'system' THEN 1 WHEN 'developer' THEN 2 WHEN 'user' THEN 3
             WHEN 'assistant' THEN 4 WHEN 'model' THEN 4 WHEN 'tool' THEN 5 ELSE 0 END
            ::UTINYINT                                                  AS role_code,
        -- the segment's own fingerprint, a number: strings make the rows wide
        hash(s.segment_hash)                                            AS content_hash,
        hash(s.prefix_hash, q.scope_hash)                               AS scoped_prefix_hash,
        -- the cache scope: a build cuts the segments by it (pipeline/prefix_shards.py)
        q.scope_hash
    FROM segments AS s
    JOIN prefix_requests AS q USING (request_id)
)

SELECT * FROM final
