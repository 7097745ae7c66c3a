-- name: prefix_reuse
-- inputs: request_prefix, requests
-- output: one row per request: the earlier request in the same cache scope (provider, model,
--   account) within the rule's lookback window that shares the longest prefix, how much is
--   shared (segments, bytes, and tokens ESTIMATED by giving the request's reported input tokens
--   to its segments in proportion to their bytes), and where the prompts first diverge
--   (schemas/prefix_reuse.json).
WITH joined AS (
    SELECT p.*, r.input_tokens
    FROM request_prefix AS p
    JOIN requests AS r USING (request_id)
),

final AS (
    SELECT
        request_id, started_at, provider, model, account,
        reuse_request_id, reuse_started_at,
        (epoch_us(started_at) - epoch_us(reuse_started_at)) / 1e6     AS reuse_gap_s,
        shared_segments, segment_count, shared_bytes, prompt_bytes,
        CASE WHEN prompt_bytes > 0
             THEN round(input_tokens * shared_bytes / prompt_bytes)::BIGINT END
                                                                        AS shared_tokens_est,
        input_tokens,
        first_diverging_position, diverging_kind, diverging_role,
        'bytes_proportional'                                            AS tokens_basis
    FROM joined
)

SELECT * FROM final
