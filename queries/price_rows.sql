-- name: price_rows
-- inputs: price_rows_source
-- output: one row per price row loaded for this session (shipped tables, then --prices files,
--   whose rows win). Prices are per million tokens; NULL = not known (never guessed).
WITH source AS (
    SELECT * FROM price_rows_source
),

final AS (
    SELECT
        row_id, layer, provider, model, effective_from, effective_to, currency, condition,
        input_cache_miss_per_mtok, input_cache_hit_per_mtok, cache_write_5m_per_mtok,
        cache_write_1h_per_mtok, output_per_mtok, notes, source
    FROM source
)

SELECT * FROM final
