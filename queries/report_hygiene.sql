-- name: report_hygiene
-- inputs: prefix_hygiene, conversations
-- output: prefix hygiene findings for the agents (or conversations) that had traffic in each
--   ISO week, worst first: ranked by the tokens they cost (tokens per affected turn x turns).
--   Findings are computed over all the traffic read: a weekly page reads its week and the
--   margin before it (pipeline/period.py), a session without a period everything.
WITH active AS (
    SELECT DISTINCT
        date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week,
        agent,
        conversation_id
    FROM conversations
),

matched AS (
    SELECT DISTINCT a.week, h.*
    FROM prefix_hygiene AS h
    JOIN active AS a
        ON (h.subject_kind = 'agent' AND a.agent = h.subject)
        OR (h.subject_kind = 'conversation' AND a.conversation_id = h.subject)
),

final AS (
    SELECT
        week,
        row_number() OVER (
            PARTITION BY week
            ORDER BY tokens_per_turn * turns_affected DESC NULLS LAST, subject, finding, position
        )::BIGINT                                               AS rank,
        subject_kind, subject, finding, detail, example_request_id, conversation_id, position,
        excerpt, turns_affected, tokens_per_turn,
        tokens_per_turn * turns_affected                        AS tokens_total
    FROM matched
)

SELECT * FROM final
