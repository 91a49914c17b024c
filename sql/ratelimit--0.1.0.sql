/* sql/ratelimit--0.1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ratelimit" to load this file. \quit

-- The answer of every check.
CREATE TYPE rl_result AS (
	allowed boolean,
	remaining bigint,
	retry_after_ms bigint,
	reset_after_ms bigint
);

-- Not STRICT: a NULL argument raises an error instead of returning a NULL
-- row, which "IF NOT (rl_allow(...)).allowed" would silently let through.
CREATE FUNCTION rl_allow(key text, algo text, "limit" bigint, "window" interval,
						 cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek(key text, algo text, "limit" bigint, "window" interval)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset(key text, algo text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_status(
	OUT endpoint text,
	OUT connected boolean,
	OUT server_version text,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT failures bigint,
	OUT connects bigint,
	OUT script_loads bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Administrative functions: granted by the administrator, not to PUBLIC.
REVOKE EXECUTE ON FUNCTION rl_reset(text, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_status() FROM PUBLIC;
