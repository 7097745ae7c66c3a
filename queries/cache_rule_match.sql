-- name: cache_rule_match
-- inputs: requests, cache_rules
-- output: the cache rule in force for each (provider, model, day) seen in `requests`: user rules
--   before built-in ones, then an exact provider before `*`, a longer model glob before a shorter
--   one, a later valid_from before an earlier one (schemas/cache_rule_match.json).
WITH keys AS (
    SELECT DISTINCT provider, model, day FROM requests
),

candidates AS (
    SELECT
        k.provider, k.model, k.day, r.rule_id, r.unit_model, r.min_tokens,
        r.granularity_tokens, r.lifetime_s, r.extended_lifetime_s, r.lookback_s,
        r.breakpoint_lookback, r.origin,
        row_number() OVER (
            PARTITION BY k.provider, k.model, k.day
            ORDER BY r.origin_rank, (r.provider = '*'), length(r.model_glob) DESC,
                     r.valid_from DESC NULLS LAST, r.rule_id
        ) AS preference
    FROM keys AS k
    JOIN cache_rules AS r
      ON (r.provider = k.provider OR r.provider = '*')
     AND coalesce(k.model, '') GLOB r.model_glob
     AND (r.valid_from IS NULL OR k.day >= r.valid_from)
     AND (r.valid_to IS NULL OR k.day < r.valid_to)
),

final AS (
    SELECT
        provider, model, day, rule_id, unit_model, min_tokens, granularity_tokens,
        lifetime_s, extended_lifetime_s, lookback_s, breakpoint_lookback, origin
    FROM candidates
    WHERE preference = 1
)

SELECT * FROM final
