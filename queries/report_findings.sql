-- name: report_findings
-- inputs: finding_breaks
-- output: the findings of each ISO week (UTC, the Monday as `week`), costliest first: the breaks
--   of that week grouped as findings groups them (scope, cause, where, change class, currency),
--   with the turns and conversations affected, tokens and money lost that week (NULL-priced
--   breaks counted, never 0), the fix, the longest idle gap before a break, and the week's costliest break of the finding as its
--   example (request, conversation, the parent's and the new excerpt). The weekly page's first
--   section. A week's rows sum to that week's break money, currency by currency.
WITH dated AS (
    SELECT
        date_trunc('week', (started_at AT TIME ZONE 'UTC')::DATE)::DATE AS week,
        *
    FROM finding_breaks
),

ranked AS (
    SELECT
        *,
        row_number() OVER (
            PARTITION BY week, scope_kind, scope, cause, changed_kind, changed_role,
                changed_position, change_class, currency
            ORDER BY tokens_lost DESC NULLS LAST, started_at, request_id
        )                                                               AS example_rank
    FROM dated
),

grouped AS (
    SELECT
        week, scope_kind, scope, cause, changed_kind, changed_role, changed_position,
        change_class, currency,
        count(*)                                                        AS turns,
        count(DISTINCT conversation_id)                                 AS conversations,
        sum(tokens_lost)::BIGINT                                        AS tokens_lost,
        count(*) FILTER (WHERE tokens_lost IS NULL)                     AS tokens_lost_unknown,
        sum(lost_cost)                                                  AS lost_cost,
        count(*) FILTER (WHERE lost_cost IS NULL)                       AS lost_cost_unknown,
        max(fix)                                                        AS fix,
        max(gap_s)                                                      AS max_gap_s,
        max(request_id) FILTER (WHERE example_rank = 1)                 AS example_request_id,
        max(conversation_id) FILTER (WHERE example_rank = 1)            AS example_conversation_id,
        max(parent_excerpt) FILTER (WHERE example_rank = 1)             AS example_parent_excerpt,
        max(excerpt) FILTER (WHERE example_rank = 1)                    AS example_excerpt
    FROM ranked
    GROUP BY ALL
),

final AS (
    SELECT
        week,
        row_number() OVER (
            PARTITION BY week
            ORDER BY lost_cost DESC NULLS LAST, tokens_lost DESC NULLS LAST, scope, cause,
                changed_position, change_class, currency
        )::BIGINT                                                       AS rank,
        scope_kind, scope, cause, changed_kind, changed_role, changed_position, change_class,
        currency, turns, conversations, tokens_lost, tokens_lost_unknown, lost_cost,
        lost_cost_unknown, fix, max_gap_s, example_request_id, example_conversation_id,
        example_parent_excerpt, example_excerpt
    FROM grouped
)

SELECT * FROM final
ORDER BY week, rank
