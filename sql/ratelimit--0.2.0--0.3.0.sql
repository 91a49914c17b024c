/* sql/ratelimit--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.3.0'" to load this file. \quit

-- 0.3.0 adds to the SQL surface; every object below is also in
-- sql/ratelimit--0.3.0.sql, and test/t/009_upgrade.pl checks that both
-- give the same catalog.

-- Cluster counters in rl_status (issue 12): redirects (MOVED and ASK
-- replies followed) and map_refreshes (cluster slot maps fetched).  New
-- OUT columns change the row type, which CREATE OR REPLACE cannot, so
-- the function is dropped and created again.  The grants an
-- administrator made on it (README: monitoring roles are granted
-- rl_status) are read first and made again; pg_init_privs keeps the
-- privileges this script sets, so pg_dump still sees those grants as
-- the administrator's own.
DO $rl_status$
DECLARE
	g record;
	grants text[] := '{}';
	initial aclitem[];
BEGIN
	FOR g IN
		SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
					ELSE quote_ident(r.rolname) END AS grantee,
			   a.is_grantable
		FROM pg_catalog.pg_proc p,
			 LATERAL pg_catalog.aclexplode(p.proacl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
		WHERE p.oid = 'rl_status()'::pg_catalog.regprocedure
		  AND a.grantee <> p.proowner
		  AND a.privilege_type = 'EXECUTE'
	LOOP
		grants := grants || (g.grantee ||
							 CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;

	DROP FUNCTION rl_status();
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

	SELECT p.proacl INTO initial FROM pg_catalog.pg_proc p
	WHERE p.oid = 'rl_status()'::pg_catalog.regprocedure;
	FOR i IN 1 .. coalesce(array_length(grants, 1), 0)
	LOOP
		EXECUTE 'GRANT EXECUTE ON FUNCTION rl_status() TO ' || grants[i];
	END LOOP;
	IF array_length(grants, 1) > 0 THEN
		UPDATE pg_catalog.pg_init_privs SET initprivs = initial
		WHERE objoid = 'rl_status()'::pg_catalog.regprocedure
		  AND classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass
		  AND objsubid = 0;
	END IF;
END
$rl_status$;
