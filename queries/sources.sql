-- name: sources
-- inputs: raw_sources
-- output: the ingest manifest, one row per source file (schemas/sources.json).
WITH source AS (
    SELECT * FROM raw_sources
),

final AS (
    SELECT source, source_path, source_hash, format, size_bytes, records, accepted, rejected,
           skipped, ingested_at, cacheaudit_version, segment_hashing
    FROM source
)

SELECT * FROM final
