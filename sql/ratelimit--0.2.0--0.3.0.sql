/* sql/ratelimit--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- 0.3.0 adds to the SQL surface; every object below is also in
-- sql/ratelimit--0.3.0.sql, and test/t/009_upgrade.pl checks that both
-- give the same catalog.

-- Server-wide statistics (issue 14)
--
-- Counts of every backend since the server started or rl_stats_reset(),
-- kept in shared memory (src/rl_stats.c).  Readable by pg_monitor, not by
-- PUBLIC; the limiter keys in rl_stats_limiters only by superusers and
-- members of pg_read_all_stats (others see NULL).  rl_stats_reset() is
-- granted to nobody: superusers only, unless they grant it.
CREATE FUNCTION rl_stats(
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT shadow_denied bigint,
	OUT cached bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT failures bigint,
	OUT failures_timeout bigint,
	OUT failures_connect bigint,
	OUT failures_refused bigint,
	OUT failures_misconfigured bigint,
	OUT failures_protocol bigint,
	OUT failures_lost bigint,
	OUT failures_unavailable bigint,
	OUT connects bigint,
	OUT script_loads bigint,
	OUT redirects bigint,
	OUT round_trips bigint,
	OUT rtt_p50_ms double precision,
	OUT rtt_p99_ms double precision,
	OUT rtt_p999_ms double precision,
	OUT limiters_evicted bigint,
	OUT limiters bigint,
	OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_rtt(OUT lower_us bigint, OUT upper_us bigint,
							 OUT round_trips bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_rtt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_limiters(OUT key text, OUT algorithm text,
								  OUT denied bigint,
								  OUT last_denied timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_limiters'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'rl_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rl_stats AS SELECT * FROM rl_stats();
CREATE VIEW rl_stats_rtt AS SELECT * FROM rl_stats_rtt();
CREATE VIEW rl_stats_limiters AS SELECT * FROM rl_stats_limiters();

REVOKE EXECUTE ON FUNCTION rl_stats(), rl_stats_rtt(), rl_stats_limiters(),
	rl_stats_reset() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats(), rl_stats_rtt(), rl_stats_limiters()
	TO pg_monitor;
GRANT SELECT ON rl_stats, rl_stats_rtt, rl_stats_limiters TO pg_monitor;
