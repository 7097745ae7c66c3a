-- name: model_aliases
-- inputs: model_aliases_source
-- output: one row per model alias: a requested name (exact or GLOB pattern) that is priced as
--   another model while the alias is in force.
WITH source AS (
    SELECT * FROM model_aliases_source
),

final AS (
    SELECT row_id, layer, provider, alias, model, effective_from, effective_to, note, source
    FROM source
)

SELECT * FROM final
