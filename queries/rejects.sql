-- name: rejects
-- inputs: raw_rejects
-- output: records that could not be read, with the reason (schemas/rejects.json).
WITH source AS (
    SELECT * FROM raw_rejects
),

final AS (
    SELECT source, source_index, reason, excerpt, ingested_at
    FROM source
)

SELECT * FROM final
