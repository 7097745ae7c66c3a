-- name: segments
-- inputs: raw_segments
-- output: ordered prompt segments per request (schemas/segments.json), position 0 first.
WITH source AS (
    SELECT * FROM raw_segments
),

final AS (
    SELECT request_id, day, position, kind, role, segment_hash, prefix_hash, bytes
    FROM source
)

SELECT * FROM final
