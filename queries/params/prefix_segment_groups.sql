-- name: prefix_segment_groups
-- inputs: prefix_segments, prefix_requests
-- parameters: $groups, as in prefix_request_groups.sql. Run by `cacheaudit build` after that
--   query's rows are stored, so prefix_requests is then read from them.
-- output: prefix_segments' rows, each with the group of its request's cache scope
--   (`scope_group`).
SELECT s.*, q.scope_hash % $groups AS scope_group
FROM prefix_segments AS s
JOIN prefix_requests AS q USING (request_id)
