-- name: conversation_seed
-- inputs: none
-- output: no rows: the columns of conversation_links that a seeded run of it looks up of
--   earlier requests (schemas/conversation_seed.json). A view reading nothing, so every session
--   has one; `build` puts the stored rows of the days before the first one it computes in its
--   place (pipeline/conversation_days.py).
WITH final AS (
    SELECT
        NULL::VARCHAR           AS request_id,
        NULL::VARCHAR           AS session_id,
        NULL::TIMESTAMPTZ       AS started_at,
        NULL::BIGINT            AS arrival_order,
        NULL::UBIGINT           AS scope_hash,
        NULL::UBIGINT           AS session_hash,
        NULL::UBIGINT           AS same_prompt_hash,
        NULL::BIGINT            AS history_hash,
        NULL::BIGINT            AS first_turn_hash,
        NULL::BIGINT            AS first_exchange_hash,
        NULL::BIGINT            AS system_hash,
        NULL::BIGINT            AS tools_set_hash,
        NULL::BIGINT            AS link_window_s,
        NULL::BOOLEAN           AS processed,
        NULL::BIGINT            AS history_parent,
        NULL::BIGINT            AS prefix_parent,
        NULL::BOOLEAN           AS fork,
        NULL::BOOLEAN           AS second_turn,
        NULL::BIGINT            AS retry_root,
        NULL::BIGINT            AS root_id,
        NULL::UBIGINT           AS turn_session_hash,
        NULL::BIGINT            AS root_order,
        NULL::BIGINT            AS conversation_ref
    WHERE false
)

SELECT * FROM final
