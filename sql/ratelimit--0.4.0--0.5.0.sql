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
