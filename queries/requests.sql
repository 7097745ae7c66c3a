-- name: requests
-- inputs: raw_requests
-- output: one row per HTTP exchange with an LLM API (schemas/requests.json documents every
--   column and its unit). NULL = not known; usage is never summed over stream chunks.
WITH source AS (
    SELECT * FROM raw_requests
),

final AS (
    SELECT
        request_id, started_at, day, provider, api, host, path, model, requested_model,
        account, session_id, agent, tags, stream, status_code, outcome, usage_status,
        input_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens,
        uncached_input_tokens, output_tokens, reasoning_tokens, reported_cost,
        tool_prompt_tokens, audio_input_tokens, audio_cache_read_tokens, audio_output_tokens,
        web_search_requests,
        largest_pass_prompt_tokens, smallest_pass_prompt_tokens,
        ttfb_ms, first_reasoning_ms, ttft_ms, duration_ms, finish_reason, error_type,
        error_message, usage_semantics, raw_usage, segment_count, prompt_bytes,
        last_prefix_hash, cache_breakpoints, cache_ttls, request_bytes, response_bytes, source, source_index,
        simulated
    FROM source
)

SELECT * FROM final
