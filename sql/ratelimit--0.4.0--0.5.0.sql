/* sql/ratelimit--0.4.0--0.5.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.5.0'" to load this file. \quit

-- Named policies (issue 24)
--
-- A policy is a limiter's parameters kept as data: a row of rl_policies,
-- changed with an UPDATE, read by the calls by name through a cache in
-- each backend that the table's triggers invalidate (src/rl_policies.c).
-- A policy's limiter is its key and the policy's name and algorithm, not
-- its limit, window or burst: changing those keeps each key's state;
-- changing its algorithm starts every key afresh.  A row is checked when
-- written with the rules and SQLSTATEs of a call's arguments.  The owner
-- writes the table; anyone may read it (a limit is no secret to those
-- who are held to it).  Kept by pg_dump as the extension's configuration.
CREATE TABLE rl_policies (
	name text COLLATE "C" CONSTRAINT rl_policies_pkey PRIMARY KEY,
	algo text NOT NULL,
	"limit" bigint NOT NULL,
	"window" interval NOT NULL,
	burst bigint,
	enforce boolean NOT NULL DEFAULT true,
	failure_mode text,
	description text
);
SELECT pg_catalog.pg_extension_config_dump('rl_policies', '');

CREATE FUNCTION rl_policies_check()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policies_check'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_policies_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policies_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE TRIGGER rl_policies_check BEFORE INSERT OR UPDATE ON rl_policies
	FOR EACH ROW EXECUTE FUNCTION rl_policies_check();
CREATE TRIGGER rl_policies_changed AFTER DELETE OR TRUNCATE ON rl_policies
	FOR EACH STATEMENT EXECUTE FUNCTION rl_policies_changed();

REVOKE ALL ON rl_policies FROM PUBLIC;
GRANT SELECT ON rl_policies TO PUBLIC;

-- The calls by name return what the parameter forms return; an unknown
-- policy is an ERROR with SQLSTATE RL404.
CREATE FUNCTION rl_allow(key text, policy text, cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek(key text, policy text)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset(key text, policy text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_policies_check(),
	rl_policies_changed(),
	rl_allow(text, text, bigint),
	rl_peek(text, text),
	rl_reset(text, text)
FROM PUBLIC;

-- Batches by policy name.  A NULL or quoted third argument fits both
-- cost forms: cast it (NULL::bigint), as with the parameter forms.
CREATE FUNCTION rl_allow_many(keys text[], policy text, cost bigint DEFAULT 1)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION rl_allow_many(keys text[], policy text, costs bigint[])
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- rl_acquire by policy name: max_wait first and required, so that a call
-- with a number or an interval in third or fourth place cannot mean the
-- parameter form rl_acquire(key, algo, limit, window).
CREATE FUNCTION rl_acquire(key text, policy text, max_wait interval,
						   cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_acquire_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Layered checks over policies: each policy once, all admit or none is
-- charged.
CREATE FUNCTION rl_allow_layered(key text, policies text[], cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek_layered(key text, policies text[])
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset_layered(key text, policies text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- PostgREST by policy name; the RateLimit fields name the policy.
CREATE FUNCTION rl_postgrest_guard(policy text, key text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rl_postgrest_guard_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The triggers take 'policy=NAME' in place of algo, limit and window:
-- key columns, 'policy=NAME'[, on_deny[, cost column]].

-- Statistics per policy: this database's policies called since the
-- server started (ratelimit.max_policies of them at most, in all
-- databases), with the counts since then or rl_stats_reset().
CREATE FUNCTION rl_stats_policies(
	OUT policy text,
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT shadow_denied bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT fail_error bigint,
	OUT fail_local bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_policies'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rl_stats_policies AS SELECT * FROM rl_stats_policies();

REVOKE EXECUTE ON FUNCTION
	rl_allow_many(text[], text, bigint),
	rl_allow_many(text[], text, bigint[]),
	rl_acquire(text, text, interval, bigint),
	rl_allow_layered(text, text[], bigint),
	rl_peek_layered(text, text[]),
	rl_reset_layered(text, text[]),
	rl_postgrest_guard(text, text),
	rl_stats_policies()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats_policies() TO pg_monitor;
GRANT SELECT ON rl_stats_policies TO pg_monitor;

-- rl_ping: the verification step (issue 27)
--
-- Connects now and has each Redis server answer (standalone: the server;
-- Sentinel: the master they name; Cluster: every master of the slot map),
-- a row per server with its product, version and round trip; an ERROR
-- (SQLSTATE class 08) names the server that cannot be used, what failed
-- and the setting to fix, whatever ratelimit.failure_mode.  On the local
-- engine one row says so.  For pg_monitor, not PUBLIC: it opens
-- connections to Redis.
CREATE FUNCTION rl_ping(
	OUT engine text,
	OUT mode text,
	OUT endpoint text,
	OUT server text,
	OUT version text,
	OUT rtt_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_ping'
LANGUAGE C VOLATILE PARALLEL UNSAFE
ROWS 3;

REVOKE ALL ON FUNCTION rl_ping() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_ping() TO pg_monitor;
