-- name: request_costs
-- inputs: requests, expected_cache, price_rows_source, price_windows_source, model_aliases_source, gateway_prefixes_source, price_digest_source
-- output: one row per request, priced with the price row in force at the request's own
--   timestamp (schemas/request_costs.json documents every column). Unpriced is NULL with
--   unpriced_reason, never 0. A cost the provider reported wins and is labelled where its
--   currency is known (OpenRouter: USD); any other server's reported cost is kept in
--   reported_cost only, and the request is priced from the tables like any other. So every
--   cost_total has a currency, and "priced" is `cost_total IS NOT NULL` in every view.
--   Buckets: uncached input at the miss price, cache read at the hit price, 5m writes
--   (cache_write - cache_write_1h; or the provider's single write price), 1h writes, output.
--   A long-context tier is chosen from the whole prompt of each sampling pass (the largest,
--   for a compacted response); passes on both sides of a threshold leave the request unpriced.
--   Audio input (and audio cache reads) and audio output at the row's audio prices where it
--   has them, at the text prices where it has none. Server-side web searches at the row's fee per 1,000, in
--   cost_web_search and inside cost_total; a response that reports no count pays no fee. A
--   winning row with no fee (empty: unknown, as in our researched rows, which track tokens)
--   takes the fee of the best-ranked row in force for the priced model, in its currency, that
--   has one (the price library's, also for a name our aliases keep from it: a fee is no token
--   price); a search with no fee anywhere leaves the request unpriced
--   (no_price_for_web_search). A fee per request (Perplexity) is in cost_request_fee and
--   inside cost_total; a winning row without one takes it from the next row as a search fee.
-- When each provider began to offer prompt caching (its announcement): before that nothing
-- could be read from a cache, so an absent cache read is a known 0 for pricing (requests keeps
-- NULL: that is what was reported). OpenAI https://openai.com/index/api-prompt-caching/,
-- Anthropic https://www.anthropic.com/news/prompt-caching, DeepSeek
-- https://api-docs.deepseek.com/news/news0802.
WITH caching_began AS (
    SELECT * FROM (VALUES
        ('openai', TIMESTAMPTZ '2024-10-01 00:00:00+00'),
        ('anthropic', TIMESTAMPTZ '2024-08-14 00:00:00+00'),
        ('deepseek', TIMESTAMPTZ '2024-08-02 00:00:00+00')
    ) AS t(provider, began)
),

reported AS (
    SELECT
        r.*,
        r.cache_read_tokens IS NULL AND r.started_at < b.began          AS read_before_caching
    FROM requests AS r
    LEFT JOIN caching_began AS b USING (provider)
),

source AS (
    SELECT
        row_number() OVER ()            AS req_key,
        request_id, started_at, provider, model,
        input_tokens,
        CASE WHEN read_before_caching THEN 0 ELSE cache_read_tokens END AS cache_read_tokens,
        cache_write_tokens, cache_write_1h_tokens,
        CASE WHEN read_before_caching THEN input_tokens - coalesce(cache_write_tokens, 0)
             ELSE uncached_input_tokens END                             AS uncached_input_tokens,
        coalesce(read_before_caching, false)                            AS read_before_caching,
        output_tokens, reported_cost, cache_ttls,
        audio_input_tokens, audio_output_tokens, web_search_requests,
        -- the audio part of the cache reads; 0 without audio or without reads, NULL when audio
        -- was sent and read from the cache but the split was not reported
        CASE WHEN coalesce(audio_input_tokens, 0) = 0 THEN 0
             WHEN read_before_caching OR cache_read_tokens = 0 THEN 0
             ELSE audio_cache_read_tokens END                           AS audio_read_tokens,
        coalesce(largest_pass_prompt_tokens, input_tokens)              AS tier_prompt_tokens,
        smallest_pass_prompt_tokens,
        lower(model)                    AS model_lc,
        started_at AT TIME ZONE 'UTC'   AS utc_wall
    FROM reported
),

-- A gateway prefix (openai/ on OpenRouter; models/ anywhere) names whose prices apply.
gateway AS (
    SELECT s.req_key, g.prefix, g.provider AS prefix_provider
    FROM source AS s
    JOIN gateway_prefixes_source AS g
        ON strpos(s.model_lc, '/') > 0
        AND g.prefix = split_part(s.model_lc, '/', 1)
        AND (g.gateway = s.provider OR g.gateway = '*')
    QUALIFY row_number() OVER (
        PARTITION BY s.req_key ORDER BY g.layer_rank, g.gateway = '*', g.load_order
    ) = 1
),

named AS (
    SELECT
        s.*,
        CASE WHEN g.prefix IS NULL THEN s.provider
             ELSE coalesce(g.prefix_provider, s.provider) END           AS lookup_provider,
        CASE WHEN g.prefix IS NULL THEN s.model_lc
             ELSE substr(s.model_lc, length(g.prefix) + 2) END          AS lookup_model
    FROM source AS s
    LEFT JOIN gateway AS g USING (req_key)
),

-- A price row for the exact name requested (not a pattern), in force at the request's time:
-- the most preferred layer that has one (0 user, 1 shipped).
exact_named AS (
    SELECT n.req_key, min(p.layer_rank)                                 AS exact_layer_rank
    FROM named AS n
    JOIN price_rows_source AS p
        ON p.provider = n.lookup_provider
        AND NOT p.model_is_pattern
        AND p.model = n.lookup_model
        AND (p.effective_from IS NULL OR n.started_at >= p.effective_from)
        AND (p.effective_to IS NULL OR n.started_at < p.effective_to)
    GROUP BY n.req_key
),

-- Dated snapshots and moving names (deepseek-chat) map to the priced model while in force,
-- unless an exact row of the alias's layer or a preferred one is in force (exact_named): a
-- user row for claude-sonnet-4-5-20250929 wins over the shipped alias, a user alias over a
-- shipped row. pipeline/prices/resolve.py applies the same rule for `prices show`.
alias_match AS (
    SELECT n.req_key, a.model AS alias_model, a.row_id AS alias_row
    FROM named AS n
    LEFT JOIN exact_named AS e USING (req_key)
    JOIN model_aliases_source AS a
        ON a.provider = n.lookup_provider
        AND n.lookup_model GLOB a.alias
        AND (a.effective_from IS NULL OR n.started_at >= a.effective_from)
        AND (a.effective_to IS NULL OR n.started_at < a.effective_to)
        AND (e.exact_layer_rank IS NULL OR a.layer_rank < e.exact_layer_rank)
    QUALIFY row_number() OVER (
        PARTITION BY n.req_key
        ORDER BY a.layer_rank, a.alias_is_pattern, length(a.alias) DESC, a.load_order
    ) = 1
),

resolved AS (
    SELECT
        n.*,
        m.alias_row,
        coalesce(m.alias_model, n.lookup_model)                         AS price_model,
        hour(n.utc_wall) * 3600 + minute(n.utc_wall) * 60 + second(n.utc_wall)
                                                                        AS utc_second,
        isodow(n.utc_wall)                                              AS utc_weekday
    FROM named AS n
    LEFT JOIN alias_match AS m USING (req_key)
),

-- which rows name each distinct model: the GLOB runs once per model name, not per request
-- (the price library brings thousands of rows, hundreds of them patterns)
naming AS (
    SELECT m.lookup_provider, m.price_model, p.row_id
    FROM (SELECT DISTINCT lookup_provider, price_model FROM resolved) AS m
    JOIN price_rows_source AS p
        ON p.provider = m.lookup_provider
        AND m.price_model GLOB p.model
),

-- Names our researched rows or the user's give a life of their own through an alias (a moving
-- name such as deepseek-chat, a dated snapshot): the price library (layer_rank 2) is not asked
-- for them at any time, so a name whose alias ended stays unpriced after its end instead of
-- taking the library's undated price. Elsewhere a higher layer's row in force wins by rank, and
-- the library fills the times our rows do not cover.
known_above AS (
    SELECT DISTINCT m.lookup_provider, m.lookup_model
    FROM (SELECT DISTINCT lookup_provider, lookup_model FROM resolved) AS m
    JOIN model_aliases_source AS a
        ON a.provider = m.lookup_provider
        AND a.layer_rank < 2
        AND m.lookup_model GLOB a.alias
),

-- every row in force for the priced name; `priceable`: not a library row for a name an alias
-- of ours gives a life of its own (those still lend a missing fee: search_fee, request_fee).
-- Only what the choice reads: a request has a few rows in force, and the prices of the one
-- chosen are joined once it is (10M requests carried 17M whole rows, spilling gigabytes).
dated AS (
    SELECT
        r.req_key, p.row_id, p.layer_rank, p.currency_rank, p.currency, p.specificity,
        p.model_is_pattern, p.effective_from, p.load_order, p.min_prompt_tokens, p.weekdays,
        p.has_time_window, p.web_search_per_1k, p.request_fee_per_1k,
        (p.layer_rank < 2 OR k.lookup_model IS NULL)                    AS priceable
    FROM resolved AS r
    JOIN naming AS m
        ON m.lookup_provider = r.lookup_provider
        AND m.price_model = r.price_model
    JOIN price_rows_source AS p USING (row_id)
    LEFT JOIN known_above AS k
        ON k.lookup_provider = r.lookup_provider
        AND k.lookup_model = r.lookup_model
    WHERE (p.effective_from IS NULL OR r.started_at >= p.effective_from)
        AND (p.effective_to IS NULL OR r.started_at < p.effective_to)
),

in_force AS (
    SELECT * EXCLUDE (priceable) FROM dated WHERE priceable
),

-- Conditions: time-of-day window, weekday, whole-prompt size. The best row wins: user before
-- shipped, preferred currency, more condition clauses, exact name, later start, then load
-- order (file order, then line number: resolve.py's order, never the row_id text, where
-- "x.csv:11" sorts before "x.csv:2"). `prices check` refuses two rows of equal rank that can
-- both apply, so load order only ever decides between different model patterns.
chosen_row AS (
    SELECT f.req_key, f.row_id
    FROM in_force AS f
    JOIN resolved AS r USING (req_key)
    LEFT JOIN price_windows_source AS w
        ON w.row_id = f.row_id
        AND r.utc_second >= w.start_second
        AND r.utc_second < w.end_second
    WHERE (f.min_prompt_tokens IS NULL OR r.tier_prompt_tokens >= f.min_prompt_tokens)
        AND (f.weekdays IS NULL OR list_contains(f.weekdays, r.utc_weekday))
        AND (NOT f.has_time_window OR w.row_id IS NOT NULL)
    QUALIFY row_number() OVER (
        PARTITION BY f.req_key
        ORDER BY f.layer_rank, f.currency_rank, f.specificity DESC, f.model_is_pattern,
            f.effective_from DESC NULLS LAST, f.load_order
    ) = 1
),

chosen AS (
    SELECT c.req_key, p.*
    FROM chosen_row AS c
    JOIN price_rows_source AS p USING (row_id)
),

-- the fee per 1,000 searches where the winning row has none (see the header): only for the
-- requests that searched, so the extra ranking touches a handful of rows
search_fee AS (
    SELECT f.req_key, f.web_search_per_1k
    FROM dated AS f
    JOIN chosen AS c USING (req_key)
    JOIN resolved AS r USING (req_key)
    WHERE r.web_search_requests > 0
        AND c.web_search_per_1k IS NULL
        AND f.web_search_per_1k IS NOT NULL
        AND f.currency = c.currency
    QUALIFY row_number() OVER (
        PARTITION BY f.req_key
        ORDER BY f.layer_rank, f.specificity DESC, f.model_is_pattern,
            f.effective_from DESC NULLS LAST, f.load_order
    ) = 1
),

-- the fee per 1,000 requests where the winning row has none, as for searches: a user's own
-- token prices for a Perplexity model keep the library's fee (rows with a fee are few, so the
-- ranking touches only their requests)
request_fee AS (
    SELECT f.req_key, f.request_fee_per_1k
    FROM dated AS f
    JOIN chosen AS c USING (req_key)
    WHERE c.request_fee_per_1k IS NULL
        AND f.request_fee_per_1k IS NOT NULL
        AND f.currency = c.currency
    QUALIFY row_number() OVER (
        PARTITION BY f.req_key
        ORDER BY f.layer_rank, f.specificity DESC, f.model_is_pattern,
            f.effective_from DESC NULLS LAST, f.load_order
    ) = 1
),

priced AS (
    SELECT
        r.*,
        c.row_id                        AS price_row,
        c.layer                         AS price_layer,
        c.condition                     AS price_condition,
        c.currency                      AS price_currency,
        c.input_cache_miss_per_mtok     AS p_miss,
        c.input_cache_hit_per_mtok      AS p_hit,
        c.cache_write_5m_per_mtok       AS p_w5m,
        c.cache_write_1h_per_mtok       AS p_w1h,
        c.output_per_mtok               AS p_out,
        -- what an audio token costs over a text token (0 where the row has no audio price)
        coalesce(c.input_audio_cache_miss_per_mtok - c.input_cache_miss_per_mtok, 0)
                                        AS p_audio_miss_extra,
        coalesce(c.input_audio_cache_hit_per_mtok - c.input_cache_hit_per_mtok, 0)
                                        AS p_audio_hit_extra,
        coalesce(c.output_audio_per_mtok - c.output_per_mtok, 0)
                                        AS p_audio_out_extra,
        coalesce(c.web_search_per_1k, s.web_search_per_1k) AS p_search,
        coalesce(c.request_fee_per_1k, q.request_fee_per_1k) AS p_request,
        c.row_id IS NOT NULL            AS has_row,
        EXISTS (
            SELECT 1 FROM price_rows_source AS k
            WHERE k.provider = r.lookup_provider AND r.price_model GLOB k.model
        )                               AS model_known,
        -- A compacted response whose passes fall on both sides of the row's threshold: each
        -- pass has its own rate, which one row cannot express.
        coalesce(c.min_prompt_tokens > r.smallest_pass_prompt_tokens, false)
                                                                        AS tiers_split
    FROM resolved AS r
    LEFT JOIN chosen AS c USING (req_key)
    LEFT JOIN search_fee AS s USING (req_key)
    LEFT JOIN request_fee AS q USING (req_key)
),

-- The 1h part of the writes. Unreported split (a stream's last delta without the breakdown, a
-- Bedrock fallback): the request's own breakpoints decide when they all have one lifetime;
-- a mix leaves it unknown (NULL), never 0. No split in the dialect: every write is "5m".
write_split AS (
    SELECT
        *,
        CASE WHEN cache_write_tokens IS NULL THEN NULL
             WHEN cache_write_1h_tokens IS NOT NULL THEN cache_write_1h_tokens
             WHEN cache_write_tokens = 0 THEN 0
             WHEN NOT coalesce(list_contains(cache_ttls, '1h'), false) THEN 0
             WHEN NOT list_contains(cache_ttls, '5m') THEN cache_write_tokens
        END                                                             AS w1h_tokens
    FROM priced
),

split AS (
    SELECT
        *,
        cache_write_tokens - w1h_tokens                                 AS w5m_tokens,
        coalesce(audio_input_tokens, 0) - audio_read_tokens             AS audio_uncached_tokens
    FROM write_split
),

-- tokens x price per million; 0 tokens cost 0 even without a price; no row -> NULL.
buckets AS (
    SELECT
        *,
        CASE WHEN NOT has_row THEN NULL WHEN uncached_input_tokens = 0 THEN 0::DOUBLE
             ELSE (uncached_input_tokens * p_miss
                   + audio_uncached_tokens * p_audio_miss_extra) / 1e6 END
                                                                        AS c_unc,
        CASE WHEN NOT has_row THEN NULL WHEN cache_read_tokens = 0 THEN 0::DOUBLE
             ELSE (cache_read_tokens * p_hit
                   + audio_read_tokens * p_audio_hit_extra) / 1e6 END   AS c_read,
        CASE WHEN NOT has_row THEN NULL WHEN w5m_tokens = 0 THEN 0::DOUBLE
             ELSE w5m_tokens * p_w5m / 1e6 END                          AS c_w5m,
        CASE WHEN NOT has_row THEN NULL WHEN w1h_tokens = 0 THEN 0::DOUBLE
             ELSE w1h_tokens * p_w1h / 1e6 END                          AS c_w1h,
        -- spoken output at the row's audio output price; unknown (NULL) where the row has one
        -- and the response did not say how much of its output was audio
        CASE WHEN NOT has_row THEN NULL WHEN output_tokens = 0 THEN 0::DOUBLE
             WHEN p_audio_out_extra <> 0 AND audio_output_tokens IS NULL THEN NULL
             ELSE (output_tokens * p_out
                   + coalesce(audio_output_tokens, 0) * p_audio_out_extra) / 1e6 END
                                                                        AS c_out,
        CASE WHEN NOT has_row THEN NULL WHEN input_tokens = 0 THEN 0::DOUBLE
             ELSE (input_tokens * p_miss
                   + coalesce(audio_input_tokens, 0) * p_audio_miss_extra) / 1e6 END
                                                                        AS c_all_miss,
        CASE WHEN web_search_requests IS NULL THEN NULL
             WHEN web_search_requests = 0 THEN 0::DOUBLE
             WHEN NOT has_row THEN NULL
             ELSE web_search_requests * p_search / 1e3 END              AS c_search,
        -- a fee per request on top of the tokens (none where the row has none)
        CASE WHEN NOT has_row THEN NULL
             ELSE coalesce(p_request, 0) / 1e3 END                      AS c_request
    FROM split
),

computed AS (
    SELECT
        *,
        -- Unreported writes (DeepSeek, Gemini, older OpenAI) are already inside the uncached
        -- bucket (requests.uncached_input_tokens counts them as none), so they add nothing.
        CASE WHEN NOT tiers_split THEN
            c_unc + c_read
            + CASE WHEN cache_write_tokens IS NULL THEN 0::DOUBLE ELSE c_w5m + c_w1h END
            + c_out
            + CASE WHEN web_search_requests > 0 THEN c_search ELSE 0::DOUBLE END
            + c_request
            END                                                         AS cost_computed,
        CASE WHEN NOT tiers_split THEN c_all_miss + c_out
            + CASE WHEN web_search_requests > 0 THEN c_search ELSE 0::DOUBLE END
            + c_request
            END                                                         AS cost_no_cache_computed,
        CASE
            WHEN input_tokens IS NULL THEN 'input_unknown'
            WHEN cache_read_tokens IS NULL THEN 'cache_read_unknown'
            WHEN output_tokens IS NULL THEN 'output_unknown'
            WHEN cache_write_tokens IS NOT NULL AND w1h_tokens IS NULL THEN 'cache_write_ttl_unknown'
            WHEN model IS NULL THEN 'model_unknown'
            -- no start recorded (a VCR cassette without Date headers): no dated row can apply
            WHEN NOT has_row AND started_at IS NULL THEN 'time_unknown'
            WHEN NOT has_row AND model_known THEN 'no_price_at_time'
            WHEN NOT has_row THEN 'no_price_for_model'
            WHEN tiers_split THEN 'passes_in_different_price_tiers'
            WHEN audio_read_tokens IS NULL THEN 'audio_cache_split_unknown'
            WHEN output_tokens > 0 AND p_audio_out_extra <> 0 AND audio_output_tokens IS NULL
                THEN 'audio_output_unknown'
            WHEN c_unc IS NULL THEN 'no_price_for_uncached_input'
            WHEN c_read IS NULL THEN 'no_price_for_cache_read'
            WHEN cache_write_tokens IS NOT NULL AND c_w5m IS NULL THEN 'no_price_for_cache_write_5m'
            WHEN cache_write_tokens IS NOT NULL AND c_w1h IS NULL THEN 'no_price_for_cache_write_1h'
            WHEN c_out IS NULL THEN 'no_price_for_output'
            WHEN web_search_requests > 0 AND c_search IS NULL THEN 'no_price_for_web_search'
        END                                                             AS computed_unpriced_reason,
        -- OpenRouter reports usage.cost in USD (schemas/requests.json, reported_cost). Another
        -- server's usage.cost (a LiteLLM-style gateway) has no known currency: not used here.
        CASE WHEN reported_cost IS NOT NULL AND provider = 'openrouter' THEN 'USD' END
                                                                        AS reported_currency
    FROM buckets
),

-- The one cost of the request: the reported one where its currency is known, else ours.
totals AS (
    SELECT
        *,
        -- Unpriced although the provider reported a cost: say so, it is why the reported
        -- number is not the total (and the tables could not price the request either).
        CASE WHEN reported_currency IS NULL AND reported_cost IS NOT NULL
                  AND cost_computed IS NULL THEN 'reported_cost_currency_unknown'
             ELSE computed_unpriced_reason END                          AS unpriced_reason,
        coalesce(reported_currency, price_currency)                     AS currency,
        CASE WHEN reported_currency IS NOT NULL THEN reported_cost
             ELSE cost_computed END                                     AS cost_total,
        CASE WHEN reported_currency IS NOT NULL THEN 'reported'
             WHEN cost_computed IS NOT NULL THEN 'computed' END         AS cost_source
    FROM computed
),

-- Ideal: every token expected_cache says was reusable is read from the cache. The extra reads
-- come out of the 1h writes first, then 5m writes, then uncached input (the prefix order).
-- A request that read MORE than expected keeps its reads: nothing is left on its table (0),
-- never a negative amount that would cancel other requests' losses in a sum.
ideal_tokens AS (
    SELECT
        c.*,
        e.expected_read_tokens,
        -- least/greatest skip NULLs in DuckDB, so an unknown expectation is kept NULL here.
        CASE WHEN e.expected_read_tokens IS NOT NULL
             THEN least(greatest(e.expected_read_tokens, 0), c.input_tokens)
                  - c.cache_read_tokens END                             AS delta
    FROM totals AS c
    LEFT JOIN expected_cache AS e
        ON e.request_id = c.request_id
),

ideal_moves AS (
    SELECT
        *,
        least(greatest(delta, 0), coalesce(w1h_tokens, 0))              AS move_1h,
        least(greatest(delta, 0) - least(greatest(delta, 0), coalesce(w1h_tokens, 0)),
              coalesce(w5m_tokens, 0))                                  AS move_5m
    FROM ideal_tokens
),

ideal_buckets AS (
    SELECT
        *,
        uncached_input_tokens - (greatest(delta, 0) - move_1h - move_5m)
                                                                        AS ideal_unc,
        -- (CASE, not greatest: greatest skips NULL, and an unknown delta must stay unknown)
        cache_read_tokens + CASE WHEN delta < 0 THEN 0 ELSE delta END   AS ideal_read,
        w5m_tokens - move_5m                                            AS ideal_w5m,
        w1h_tokens - move_1h                                            AS ideal_w1h
    FROM ideal_moves
),

ideal AS (
    SELECT
        *,
        -- the tokens the ideal reads from the cache are taken as text: the audio stays where
        -- it was, so its extra price is in both costs and never counted as left on the table
        CASE WHEN ideal_unc = 0 THEN 0::DOUBLE
             ELSE (ideal_unc * p_miss
                   + least(audio_uncached_tokens, ideal_unc) * p_audio_miss_extra) / 1e6 END
        + CASE WHEN ideal_read = 0 THEN 0::DOUBLE
               ELSE (ideal_read * p_hit + audio_read_tokens * p_audio_hit_extra) / 1e6 END
        + CASE WHEN ideal_w5m IS NULL OR ideal_w5m = 0 THEN 0::DOUBLE
               ELSE ideal_w5m * p_w5m / 1e6 END
        + CASE WHEN ideal_w1h IS NULL OR ideal_w1h = 0 THEN 0::DOUBLE
               ELSE ideal_w1h * p_w1h / 1e6 END
        + c_out
        + CASE WHEN web_search_requests > 0 THEN c_search ELSE 0::DOUBLE END
        + c_request
                                                                        AS ideal_raw
    FROM ideal_buckets
),

-- Never negative (reads above the expectation are kept, so only a price row charging more for
-- a hit than for a miss could make it so); NULL stays NULL (greatest would skip it).
left_over AS (
    SELECT
        *,
        CASE WHEN cost_computed - ideal_raw < 0 THEN 0::DOUBLE
             ELSE cost_computed - ideal_raw END                         AS left_raw
    FROM ideal
),

final AS (
    SELECT
        i.request_id,
        i.started_at,
        i.provider,
        i.model,
        i.lookup_provider                                               AS price_provider,
        i.price_model,
        i.alias_row,
        i.price_row,
        i.price_layer,
        i.price_condition,
        i.currency,
        i.input_tokens,
        i.cache_read_tokens,
        i.read_before_caching,
        i.w5m_tokens                                                    AS cache_write_5m_tokens,
        i.w1h_tokens                                                    AS cache_write_1h_tokens,
        i.uncached_input_tokens,
        i.output_tokens,
        i.audio_input_tokens,
        i.audio_read_tokens                                             AS audio_cache_read_tokens,
        i.audio_output_tokens,
        i.web_search_requests,
        i.c_unc                                                         AS cost_uncached_input,
        i.c_read                                                        AS cost_cache_read,
        i.c_w5m                                                         AS cost_cache_write_5m,
        i.c_w1h                                                         AS cost_cache_write_1h,
        i.c_out                                                         AS cost_output,
        i.c_search                                                      AS cost_web_search,
        i.c_request                                                     AS cost_request_fee,
        i.cost_computed,
        i.reported_cost,
        i.cost_total,
        i.cost_source,
        i.unpriced_reason,
        CASE WHEN i.currency = i.price_currency
             THEN i.cost_no_cache_computed END                          AS cost_without_cache,
        CASE WHEN i.currency = i.price_currency
             THEN i.cost_no_cache_computed - i.cost_total END           AS savings,
        i.expected_read_tokens,
        CASE WHEN i.currency = i.price_currency AND i.cost_computed IS NOT NULL
             THEN i.cost_total - i.left_raw END                         AS cost_if_ideal,
        CASE WHEN i.currency = i.price_currency AND i.cost_computed IS NOT NULL
             THEN i.left_raw END                                        AS left_on_table,
        d.price_digest
    FROM left_over AS i
    CROSS JOIN price_digest_source AS d
)

SELECT * FROM final ORDER BY started_at, request_id
