/* sql/ratelimit--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- 0.3.0 adds to the SQL surface; every object below is also in
-- sql/ratelimit--0.3.0.sql, and test/t/009_upgrade.pl checks that both
-- give the same catalog.

-- Cluster counters in rl_status (issue 12): redirects (MOVED and ASK
-- replies followed) and map_refreshes (cluster slot maps fetched).  New
-- OUT columns change the row type, which CREATE OR REPLACE cannot, so
-- the old function is renamed and a new one created; the grants an
-- administrator made on the old one (README: monitoring roles are
-- granted rl_status) are copied with the burst functions' below, and the
-- old one is dropped there.
ALTER FUNCTION rl_status() RENAME TO rl_status_before_counters;
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
	OUT script_loads bigint,
	OUT cached bigint,
	OUT redirects bigint,
	OUT map_refreshes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_status() FROM PUBLIC;

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
	OUT fail_local bigint,
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

-- Burst (issue 14)
--
-- A capacity (burst) apart from the rate.  Layered rules with a burst
-- are of a new type, rl_burst_rule; functions whose argument list grows
-- are created anew.  The old ones are
-- renamed first, so that the grants an administrator made on them can be
-- copied to the new ones (PUBLIC, revoked since 0.2.0, stays revoked
-- unless an administrator granted it), and then dropped.  A view that
-- calls one of them would keep the upgrade from dropping it: recreate
-- such views after ALTER EXTENSION ... UPDATE.
ALTER FUNCTION rl_allow(text, text, bigint, interval, bigint)
	RENAME TO rl_allow_before_burst;
ALTER FUNCTION rl_peek(text, text, bigint, interval)
	RENAME TO rl_peek_before_burst;
ALTER FUNCTION rl_allow_many(text[], text, bigint, interval, bigint)
	RENAME TO rl_allow_many_before_burst;
ALTER FUNCTION rl_allow_many(text[], text, bigint, interval, bigint[])
	RENAME TO rl_allow_many_before_burst;
ALTER FUNCTION rl_postgrest_guard(text, bigint, interval, text)
	RENAME TO rl_postgrest_guard_before_burst;
CREATE FUNCTION rl_allow(key text, algo text, "limit" bigint, "window" interval,
						 cost bigint DEFAULT 1, burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek(key text, algo text, "limit" bigint, "window" interval,
						burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Batches: one row per key, in array order, all checks in one round trip.
CREATE FUNCTION rl_allow_many(keys text[], algo text, "limit" bigint,
							  "window" interval, cost bigint DEFAULT 1,
							  burst bigint DEFAULT NULL)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION rl_allow_many(keys text[], algo text, "limit" bigint,
							  "window" interval, costs bigint[],
							  burst bigint DEFAULT NULL)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- PostgREST: call from the db-pre-request function.  Denied requests get
-- HTTP 429 with Retry-After and RateLimit headers.
CREATE FUNCTION rl_postgrest_guard(algo text, "limit" bigint, "window" interval,
								   key text DEFAULT NULL,
								   burst bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rl_postgrest_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_allow(text, text, bigint, interval, bigint, bigint),
	rl_peek(text, text, bigint, interval, bigint),
	rl_allow_many(text[], text, bigint, interval, bigint, bigint),
	rl_allow_many(text[], text, bigint, interval, bigint[], bigint),
	rl_postgrest_guard(text, bigint, interval, text, bigint)
FROM PUBLIC;

-- Layered rules with a burst.  rl_rule keeps its three attributes: a
-- fourth would make every ('gcra', 5, '1 second')::rl_rule written for
-- 0.2.0 an error ("Input has too few columns").
CREATE TYPE rl_burst_rule AS (
	algo text,
	"limit" bigint,
	"window" interval,
	burst bigint
);

CREATE FUNCTION rl_allow_layered(key text, rules rl_burst_rule[], cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek_layered(key text, rules rl_burst_rule[])
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset_layered(key text, rules rl_burst_rule[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_allow_layered(text, rl_burst_rule[], bigint),
	rl_peek_layered(text, rl_burst_rule[]),
	rl_reset_layered(text, rl_burst_rule[])
FROM PUBLIC;

-- The old functions' grants (the five above and rl_status), copied.  GRANT in an extension script also
-- records the grant as the function's initial privilege (pg_init_privs),
-- which pg_dump would then leave out of a dump; the initial privileges
-- are set back to the ones this script gave, as a fresh install has them.
--
-- The update runs as a superuser with search_path set to the extension's
-- schema, then pg_temp; pg_catalog, left out, is searched first.  A
-- function or operator in that schema that matches a call better than
-- pg_catalog's (quote_ident(name) for quote_ident(pg_get_userbyid(...)),
-- an =(oid, integer)) would still be chosen, and run as the superuser:
-- whoever may create objects there (PUBLIC may, in schema public, on a
-- cluster upgraded from PostgreSQL 14 or older) could plant one.  So
-- every function, operator and catalog below is named with its schema.
DO $$
DECLARE
	pair record;
	item record;
	init aclitem[];
BEGIN
	FOR pair IN
		SELECT old::regprocedure::oid AS old, new::regprocedure::oid AS new
		FROM (VALUES
			('rl_allow_before_burst(text, text, bigint, interval, bigint)',
			 'rl_allow(text, text, bigint, interval, bigint, bigint)'),
			('rl_peek_before_burst(text, text, bigint, interval)',
			 'rl_peek(text, text, bigint, interval, bigint)'),
			('rl_allow_many_before_burst(text[], text, bigint, interval, bigint)',
			 'rl_allow_many(text[], text, bigint, interval, bigint, bigint)'),
			('rl_allow_many_before_burst(text[], text, bigint, interval, bigint[])',
			 'rl_allow_many(text[], text, bigint, interval, bigint[], bigint)'),
			('rl_postgrest_guard_before_burst(text, bigint, interval, text)',
			 'rl_postgrest_guard(text, bigint, interval, text, bigint)'),
			('rl_status_before_counters()', 'rl_status()')
		) AS v(old, new)
	LOOP
		SELECT initprivs INTO init FROM pg_catalog.pg_init_privs
		WHERE objoid OPERATOR(pg_catalog.=) pair.new
			AND classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
			AND objsubid OPERATOR(pg_catalog.=) 0;
		FOR item IN
			SELECT a.grantee, a.is_grantable
			FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
			WHERE p.oid OPERATOR(pg_catalog.=) pair.old
				AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
				AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
		LOOP
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s',
						   pair.new::regprocedure,
						   CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
						   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
						   CASE WHEN item.is_grantable
						   THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
		UPDATE pg_catalog.pg_init_privs SET initprivs = init
		WHERE objoid OPERATOR(pg_catalog.=) pair.new
			AND classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
			AND objsubid OPERATOR(pg_catalog.=) 0;
	END LOOP;
END
$$;

DROP FUNCTION rl_allow_before_burst(text, text, bigint, interval, bigint);
DROP FUNCTION rl_peek_before_burst(text, text, bigint, interval);
DROP FUNCTION rl_allow_many_before_burst(text[], text, bigint, interval, bigint);
DROP FUNCTION rl_allow_many_before_burst(text[], text, bigint, interval, bigint[]);
DROP FUNCTION rl_postgrest_guard_before_burst(text, bigint, interval, text);
DROP FUNCTION rl_status_before_counters();

-- rl_acquire (issue 14)
--
-- Waits up to max_wait for the call to be admitted, sleeping for the
-- retry_after_ms of each denial (cancellable, and bounded by
-- statement_timeout), then consumes; after max_wait, the denial.
CREATE FUNCTION rl_acquire(key text, algo text, "limit" bigint, "window" interval,
						   cost bigint DEFAULT 1,
						   max_wait interval DEFAULT '1 second',
						   burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_acquire(text, text, bigint, interval, bigint, interval, bigint)
FROM PUBLIC;
