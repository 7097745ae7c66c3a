-- name: segment_content
-- inputs: raw_segment_content
-- output: one row per distinct segment hash with its content (parts may repeat a hash across
--   ingest runs; this view keeps one).
WITH source AS (
    SELECT * FROM raw_segment_content
),

final AS (
    SELECT segment_hash, any_value(bytes) AS bytes, any_value(content) AS content
    FROM source
    GROUP BY segment_hash
)

SELECT * FROM final
