-- name: price_digest
-- inputs: price_digest_source
-- output: one row: the sha256 of every price, alias and gateway-prefix row in this session, so a
--   cost can be traced to the tables that produced it.
WITH source AS (
    SELECT * FROM price_digest_source
),

final AS (
    SELECT price_digest, price_rows, alias_rows, gateway_prefix_rows, user_rows, files
    FROM source
)

SELECT * FROM final
