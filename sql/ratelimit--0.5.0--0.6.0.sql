/* sql/ratelimit--0.5.0--0.6.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.6.0'" to load this file. \quit

-- Counts that follow the transaction (issue 25)
--
-- What an admitted check took can be given back when the transaction or
-- savepoint that made it aborts (src/rl_refund.c).  The owner of a limit
-- decides, never the caller: a trigger's refund option (on unless
-- "refund=off"), a policy's refund_on_abort, and for the calls by
-- parameters the superuser setting ratelimit.refund_on_abort.
--
-- The column is added without a default and then given one, so that the
-- table has no "missing value" a fresh install lacks (pg_upgrade's dump
-- would show it); the existing policies keep refunds off.
ALTER TABLE rl_policies ADD COLUMN refund_on_abort boolean;
UPDATE rl_policies SET refund_on_abort = false;
ALTER TABLE rl_policies ALTER COLUMN refund_on_abort SET DEFAULT false;
ALTER TABLE rl_policies ALTER COLUMN refund_on_abort SET NOT NULL;

-- rl_stats gains refunds and refunds_lost, after fail_local.  New OUT
-- columns change the row type, which CREATE OR REPLACE cannot, so the old
-- function and view are renamed and new ones created; the grants an
-- administrator made on the old ones (doc/statistics.md: monitoring roles
-- are granted them), the view's column grants among them, are copied, and
-- the old ones dropped.
ALTER VIEW rl_stats RENAME TO rl_stats_before_refunds;
ALTER FUNCTION rl_stats() RENAME TO rl_stats_before_refunds;

CREATE FUNCTION rl_stats(
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT shadow_denied bigint,
	OUT cached bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT fail_local bigint,
	OUT refunds bigint,
	OUT refunds_lost bigint,
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

CREATE VIEW rl_stats AS SELECT * FROM rl_stats();

REVOKE EXECUTE ON FUNCTION rl_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats() TO pg_monitor;
GRANT SELECT ON rl_stats TO pg_monitor;

-- The old function's and view's grants, copied.  GRANT in an extension
-- script also records the grant as the object's initial privilege
-- (pg_init_privs), which pg_dump would then leave out of a dump; the
-- initial privileges are set back to the ones this script gave, as a
-- fresh install has them.  Every function, operator and catalog is named
-- with its schema (see ratelimit--0.2.0--0.3.0.sql: the update runs as a
-- superuser, with the extension's schema on the search_path).
DO $$
DECLARE
	pair record;
	item record;
	init aclitem[];
BEGIN
	FOR pair IN
		SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass AS cls,
			'rl_stats_before_refunds()'::pg_catalog.regprocedure::pg_catalog.oid AS old,
			'rl_stats()'::pg_catalog.regprocedure::pg_catalog.oid AS new,
			'FUNCTION rl_stats()' AS target
		UNION ALL
		SELECT 'pg_catalog.pg_class'::pg_catalog.regclass,
			'rl_stats_before_refunds'::pg_catalog.regclass::pg_catalog.oid,
			'rl_stats'::pg_catalog.regclass::pg_catalog.oid,
			'TABLE rl_stats'
	LOOP
		SELECT initprivs INTO init FROM pg_catalog.pg_init_privs
		WHERE objoid OPERATOR(pg_catalog.=) pair.new
			AND classoid OPERATOR(pg_catalog.=) pair.cls
			AND objsubid OPERATOR(pg_catalog.=) 0;
		FOR item IN
			SELECT a.grantee, a.privilege_type, a.is_grantable
			FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
			WHERE pair.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
				AND p.oid OPERATOR(pg_catalog.=) pair.old
				AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
			UNION ALL
			SELECT a.grantee, a.privilege_type, a.is_grantable
			FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
			WHERE pair.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
				AND c.oid OPERATOR(pg_catalog.=) pair.old
				AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
		LOOP
			EXECUTE pg_catalog.format('GRANT %s ON %s TO %s%s',
						   item.privilege_type, pair.target,
						   CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
						   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
						   CASE WHEN item.is_grantable
						   THEN ' WITH GRANT OPTION' ELSE '' END);
		END LOOP;
		UPDATE pg_catalog.pg_init_privs SET initprivs = init
		WHERE objoid OPERATOR(pg_catalog.=) pair.new
			AND classoid OPERATOR(pg_catalog.=) pair.cls
			AND objsubid OPERATOR(pg_catalog.=) 0;
		-- An administrator who revoked pg_monitor's grant keeps it revoked.
		IF NOT EXISTS (
			SELECT FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
			WHERE pair.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
				AND p.oid OPERATOR(pg_catalog.=) pair.old
				AND a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
			UNION ALL
			SELECT FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
			WHERE pair.cls OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
				AND c.oid OPERATOR(pg_catalog.=) pair.old
				AND a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole)
		THEN
			EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM pg_monitor', pair.target);
		END IF;
	END LOOP;
	-- Grants on the view's columns (GRANT SELECT (denied) ON rl_stats ...),
	-- copied column by column: the new view has every column of the old.
	-- A fresh install has no initial privileges on columns, so those the
	-- copies recorded are removed.
	FOR item IN
		SELECT a.attname, x.grantee, x.privilege_type, x.is_grantable
		FROM pg_catalog.pg_class c, pg_catalog.pg_attribute a,
			pg_catalog.aclexplode(a.attacl) x
		WHERE c.oid OPERATOR(pg_catalog.=) 'rl_stats_before_refunds'::pg_catalog.regclass
			AND a.attrelid OPERATOR(pg_catalog.=) c.oid
			AND a.attnum OPERATOR(pg_catalog.>) 0
			AND NOT a.attisdropped
			AND x.grantee OPERATOR(pg_catalog.<>) c.relowner
	LOOP
		EXECUTE pg_catalog.format('GRANT %s (%I) ON TABLE rl_stats TO %s%s',
					   item.privilege_type, item.attname,
					   CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
					   CASE WHEN item.is_grantable
					   THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	DELETE FROM pg_catalog.pg_init_privs
	WHERE objoid OPERATOR(pg_catalog.=) 'rl_stats'::pg_catalog.regclass
		AND classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
		AND objsubid OPERATOR(pg_catalog.>) 0;
END
$$;

DROP VIEW rl_stats_before_refunds;
DROP FUNCTION rl_stats_before_refunds();

-- Concurrency held for the session (issue 25)
--
-- A concurrency check (algo 'concurrency') holds its slot until its
-- transaction ends.  rl_hold takes one that outlives the transaction, for
-- work that spans several: it is released by rl_release(holder), at the
-- backend's exit, or, if neither comes, when its lease (the window) ends.
-- holder is a number of the session's (NULL when nothing was taken).
CREATE FUNCTION rl_hold(key text, "limit" bigint, "window" interval,
						cost bigint DEFAULT 1,
						OUT allowed boolean, OUT holder bigint,
						OUT remaining bigint, OUT retry_after_ms bigint,
						OUT reset_after_ms bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_hold'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_hold(key text, policy text, cost bigint DEFAULT 1,
						OUT allowed boolean, OUT holder bigint,
						OUT remaining bigint, OUT retry_after_ms bigint,
						OUT reset_after_ms bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_hold_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_release(holder bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION rl_hold(text, bigint, interval, bigint),
	rl_hold(text, text, bigint), rl_release(bigint) FROM PUBLIC;
