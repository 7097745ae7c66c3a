-- name: experiment_requests
-- inputs: requests
-- output: one row per request sent by `cacheaudit experiment run`, with the plan position parsed
--   from its tags (run=, repeat=, step=, request=, phase=, order=). The experiment report reads
--   this view. Tags are joined with newlines so each `name=value` can be picked by a regex
--   (no lambdas: they do not translate to every engine).
WITH source AS (
    SELECT * FROM requests
    WHERE list_contains(tags, 'cacheaudit-experiment')
),

tagged AS (
    SELECT *, chr(10) || array_to_string(tags, chr(10)) || chr(10) AS tag_text
    FROM source
),

final AS (
    SELECT
        request_id, started_at, tags,
        nullif(regexp_extract(tag_text, '\nrun=([^\n]*)\n', 1), '')             AS run_id,
        TRY_CAST(nullif(regexp_extract(tag_text, '\nrepeat=([^\n]*)\n', 1), '') AS INTEGER)
                                                                                 AS repeat,
        nullif(regexp_extract(tag_text, '\nstep=([^\n]*)\n', 1), '')            AS step,
        nullif(regexp_extract(tag_text, '\nrequest=([^\n]*)\n', 1), '')         AS plan_request,
        coalesce(nullif(regexp_extract(tag_text, '\nphase=([^\n]*)\n', 1), ''), 'question')
                                                                                 AS phase,
        TRY_CAST(nullif(regexp_extract(tag_text, '\norder=([^\n]*)\n', 1), '') AS INTEGER)
                                                                                 AS plan_order,
        provider, host, model, outcome, usage_status,
        input_tokens, cache_read_tokens, cache_write_tokens, output_tokens,
        ttfb_ms, ttft_ms, duration_ms, finish_reason
    FROM tagged
)

SELECT * FROM final
