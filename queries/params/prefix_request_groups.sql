-- name: prefix_request_groups
-- inputs: prefix_requests
-- parameters: $groups (how many groups of cache scopes a build splits request_prefix into).
--   Run by `cacheaudit build` on a large warehouse (pipeline/prefix_groups.py).
-- output: prefix_requests' rows, each with the group of its cache scope (`scope_group`, 0-based).
--   Every window of request_prefix stays within a scope, so a group is computed alone.
SELECT *, scope_hash % $groups AS scope_group
FROM prefix_requests
