/* sql/ratelimit--0.4.0--0.5.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.5.0'" to load this file. \quit

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
