/* sql/ratelimit--0.3.0--0.4.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION ratelimit UPDATE TO '0.4.0'" to load this file. \quit

-- A limiter is its key, algorithm, limit, window and burst.  Before 0.4.0
-- it was its key and algorithm, and a call read and rewrote the state
-- under its own parameters, so one call of other parameters (a limit of a
-- billion per millisecond) undid another caller's count.  The Redis keys
-- now name the parameters too, so every limiter starts afresh after the
-- update (the old keys expire on their own), and rl_reset takes the
-- parameters that name the limiter to forget.
--
-- The old rl_reset is renamed, so that the grants an administrator made
-- on it can be copied to the new one (PUBLIC stays revoked unless an
-- administrator granted it), and then dropped.
ALTER FUNCTION rl_reset(text, text) RENAME TO rl_reset_before_parameters;
CREATE FUNCTION rl_reset(key text, algo text, "limit" bigint, "window" interval,
						 burst bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION rl_reset(text, text, bigint, interval, bigint) FROM PUBLIC;

-- The old function's grants, copied; the initial privileges are set back
-- to the ones this script gave, as a fresh install has them (see the
-- 0.2.0 to 0.3.0 script, also for why every function, operator and
-- catalog is named with its schema).
DO $$
DECLARE
	old oid := 'rl_reset_before_parameters(text, text)'::regprocedure;
	new oid := 'rl_reset(text, text, bigint, interval, bigint)'::regprocedure;
	item record;
	init aclitem[];
BEGIN
	SELECT initprivs INTO init FROM pg_catalog.pg_init_privs
	WHERE objoid OPERATOR(pg_catalog.=) new
		AND classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
		AND objsubid OPERATOR(pg_catalog.=) 0;
	FOR item IN
		SELECT a.grantee, a.is_grantable
		FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
		WHERE p.oid OPERATOR(pg_catalog.=) old
			AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
			AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
	LOOP
		EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s',
					   new::regprocedure,
					   CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
					   CASE WHEN item.is_grantable
					   THEN ' WITH GRANT OPTION' ELSE '' END);
	END LOOP;
	UPDATE pg_catalog.pg_init_privs SET initprivs = init
	WHERE objoid OPERATOR(pg_catalog.=) new
		AND classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::regclass
		AND objsubid OPERATOR(pg_catalog.=) 0;
END
$$;

DROP FUNCTION rl_reset_before_parameters(text, text);
