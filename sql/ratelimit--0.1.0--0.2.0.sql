/* sql/ratelimit--0.1.0--0.2.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.2.0'" to load this file. \quit

-- 0.2.0 makes the privilege model deliberate: no function that consumes,
-- reads or resets limiters is executable by PUBLIC (0.1.0 revoked only
-- rl_reset, rl_reset_layered and rl_status).  Grants an administrator
-- made to named roles stay as they are.
REVOKE EXECUTE ON FUNCTION
	rl_allow(text, text, bigint, interval, bigint),
	rl_peek(text, text, bigint, interval),
	rl_allow_many(text[], text, bigint, interval, bigint),
	rl_allow_many(text[], text, bigint, interval, bigint[]),
	rl_allow_layered(text, rl_rule[], bigint),
	rl_peek_layered(text, rl_rule[]),
	rl_throttle(),
	rl_throttle_statement(),
	rl_postgrest_guard(text, bigint, interval, text)
FROM PUBLIC;
