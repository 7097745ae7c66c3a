-- name: conversations
-- inputs: conversation_links
-- output: one row per request with its conversation and turn (schemas/conversations.json):
--   the columns of conversation_links that name them; queries/conversation_links.sql says how
--   requests are linked.
WITH final AS (
    SELECT
        request_id, conversation_id, turn, parent_request_id, link_method, session_id, agent,
        account, provider, model, started_at
    FROM conversation_links
)

SELECT * FROM final
