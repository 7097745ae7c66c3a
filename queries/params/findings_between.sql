-- name: findings_between
-- inputs: finding_breaks, conversations, requests
-- parameters: $since and $until (UTC instants; NULL: no bound; until exclusive), $agent (NULL:
--   every scope; else only that agent's findings). Run by `cacheaudit findings --since/--until
--   --agent`, values bound, never pasted.
-- output: the findings view's rows (schemas/findings.json) over the breaks in [since, until)
--   only: turns, tokens and money of that period, share_of_turns over the scope's later turns in
--   it, first/last seen and the example within it, and saving_per_week scaled from the
--   period's length (since to until as given; an open end at the first or last request of the
--   period; at least one day). With no bound it gives the findings view's rows (a test holds
--   the two equal).
WITH subjects AS (
    SELECT
        request_id,
        CASE WHEN agent IS NULL THEN 'conversation' ELSE 'agent' END    AS scope_kind,
        coalesce(agent, conversation_id)                                AS scope,
        turn
    FROM conversations
    WHERE ($since IS NULL OR started_at >= $since::TIMESTAMPTZ)
        AND ($until IS NULL OR started_at < $until::TIMESTAMPTZ)
),

scope_turns AS (
    SELECT scope_kind, scope, count(*) FILTER (WHERE turn > 1) AS later_turns
    FROM subjects
    GROUP BY ALL
),

-- the period's length: from --since to --until as asked (a week is 7 days, however its traffic
-- fell in it), an open end at the period's first or last request
observed AS (
    SELECT greatest(
        coalesce(
            epoch(coalesce($until::TIMESTAMPTZ, max(started_at)))
                - epoch(coalesce($since::TIMESTAMPTZ, min(started_at))),
            0
        ) / 86400.0,
        1.0
    )                                                                   AS observed_days
    FROM requests
    WHERE ($since IS NULL OR started_at >= $since::TIMESTAMPTZ)
        AND ($until IS NULL OR started_at < $until::TIMESTAMPTZ)
),

breaks AS (
    SELECT
        *,
        -- the group's example: its costliest break, ties to the earliest (then the smallest id),
        -- so every engine picks the same one and its id and excerpts come from one row
        row_number() OVER (
            PARTITION BY scope_kind, scope, cause, changed_kind, changed_role, changed_position,
                change_class, currency
            ORDER BY tokens_lost DESC NULLS LAST, started_at, request_id
        )                                                               AS example_rank
    FROM finding_breaks
    WHERE ($since IS NULL OR started_at >= $since::TIMESTAMPTZ)
        AND ($until IS NULL OR started_at < $until::TIMESTAMPTZ)
        AND ($agent IS NULL OR (scope_kind = 'agent' AND scope = $agent))
),

grouped AS (
    SELECT
        scope_kind, scope, cause, changed_kind, changed_role, changed_position, change_class,
        currency,
        count(*)                                                        AS turns,
        count(DISTINCT conversation_id)                                 AS conversations,
        sum(tokens_lost)::BIGINT                                        AS tokens_lost,
        count(*) FILTER (WHERE tokens_lost IS NULL)                     AS tokens_lost_unknown,
        sum(lost_cost)                                                  AS lost_cost,
        count(*) FILTER (WHERE lost_cost IS NULL)                       AS lost_cost_unknown,
        min(started_at)                                                 AS first_seen,
        max(started_at)                                                 AS last_seen,
        max(request_id) FILTER (WHERE example_rank = 1)                 AS example_request_id,
        max(parent_excerpt) FILTER (WHERE example_rank = 1)             AS example_parent_excerpt,
        max(excerpt) FILTER (WHERE example_rank = 1)                    AS example_excerpt,
        max(gap_s)                                                      AS max_gap_s,
        max(fix)                                                        AS fix
    FROM breaks
    GROUP BY ALL
),

final AS (
    SELECT
        g.scope_kind, g.scope, g.cause, g.changed_kind, g.changed_role, g.changed_position,
        g.change_class, g.currency, g.turns, g.conversations,
        g.turns / nullif(t.later_turns, 0)::DOUBLE                      AS share_of_turns,
        g.tokens_lost, g.tokens_lost_unknown, g.lost_cost, g.lost_cost_unknown,
        g.lost_cost * 7 / o.observed_days                               AS saving_per_week,
        g.first_seen, g.last_seen,
        g.example_request_id, g.example_parent_excerpt, g.example_excerpt, g.max_gap_s, g.fix
    FROM grouped AS g
    LEFT JOIN scope_turns AS t USING (scope_kind, scope)
    CROSS JOIN observed AS o
)

SELECT * FROM final
ORDER BY lost_cost DESC NULLS LAST, tokens_lost DESC NULLS LAST, scope, cause
